// --list and --mode support of backend_ops: the table's cases, and which backend runs which op in
// which dtypes.
#pragma once
#include <nlohmann/json.hpp>

#include "tests/backend_ops/backends.h"
#include "tests/backend_ops/runner.h"

namespace skew::ops {

/// One line per case (test shapes, then perf shapes): op, shape, dtypes, FLOPs, bytes, limits.
void run_list(const ModeOptions& o, nlohmann::json& rows);

/// The table op x backend x dtypes: "yes", "no" (the backend refuses that dtype combination), or
/// why a compiled backend is absent on this machine.
void run_support_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, nlohmann::json& rows);

}  // namespace skew::ops
