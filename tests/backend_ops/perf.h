// --mode perf of backend_ops: the perf shapes (the paper's) timed on each backend, with GFLOP/s,
// GB/s and the fraction of the roofline measured in the same run.
#pragma once
#include <nlohmann/json.hpp>

#include "tests/backend_ops/runner.h"

namespace skew::ops {

/// Time every perf case whose op contains o.filter on every backend; one line per (case, backend).
/// min_seconds: time each case at least this long (after one warm-up run); the time reported is the
/// fastest run (JSON adds the median). Returns the failure count (a case that throws).
/// full_shapes: the paper's shapes on the CPU too (else scaled: 1 x 128 tokens, 8 experts).
int run_perf_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, double min_seconds, bool full_shapes,
                  nlohmann::json& rows);

}  // namespace skew::ops
