// --mode perf of backend_ops: a named shape set's perf cases (the paper's, or bench_step's moe10m)
// timed on each backend, with GFLOP/s, GB/s and the fraction of the roofline measured in the same
// run. bench/bench_ops and bench/bench_gpu_ops emit their per-op rows from it.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "tests/backend_ops/runner.h"

namespace skew::ops {

struct PerfOptions {
    double min_seconds = 0.3;         // time each case at least this long (after one warm-up run)
    bool full_shapes = false;         // the paper's shapes on the CPU too (else scaled: 1 x 128 tokens, 8 experts)
    std::string shape_set = "paper";  // perf_shape_sets() (tests/backend_ops/op_table.h), or a comma-separated list
    bool print = true;                // one line per (case, backend) on stdout
};

/// Time every perf case of p.shape_set (each set of a comma-separated list, against one roofline per
/// backend) whose op contains o.filter on every backend. The time
/// reported is the fastest run (the row adds the median). Appends to `rows` one JSON object per
/// backend's roofline ({"backend", "roofline_gflops", "gemm", "roofline_gbps", "copy"}) and one per
/// (case, backend) ({"op", "shape", "dtypes", "backend", "us", "median_us", "gflops", "gbps",
/// "flops", "bytes", "roofline_fraction", "reps"}). Returns the failure count (a case that throws);
/// throws skew::Error for an unknown shape set.
int run_perf_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, const PerfOptions& p,
                  nlohmann::json& rows);

}  // namespace skew::ops
