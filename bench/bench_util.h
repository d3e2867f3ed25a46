// Helpers shared by the benchmarks: run a shell command and capture its output, and the git commit
// and OpenBLAS core every JSON result is tagged with.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>

#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/process_env.h"

namespace skew::bench {

/// Standard output of `cmd` run by /bin/sh, trailing newlines removed; "" when it cannot start.
inline std::string shell(const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

/// The checked-out commit (full hash), or "unknown" outside a git checkout.
inline std::string git_commit() {
    std::string c = shell("git rev-parse HEAD 2>/dev/null");
    return c.empty() ? "unknown" : c;
}

/// The OpenBLAS core the host matrix products ran on, set on `result`: "blas_core"
/// (openblas_get_corename) and "blas_core_source" (kernels/cpu/process_env.h: "cpuid",
/// "OPENBLAS_CORETYPE" or "openblas"). A benchmark calls cpu::process_env_reexec first in main.
inline void add_blas_core(nlohmann::json& result) {
    result["blas_core"] = cpu::blas_core_name();
    result["blas_core_source"] = cpu::blas_core_source();
}

/// Provenance of a result: "commit", "dirty" (uncommitted changes under `paths`, a git pathspec
/// such as "optim kernels bench"), "date" (UTC, ISO 8601) and the OpenBLAS core (add_blas_core),
/// set on `result`.
inline void add_provenance(nlohmann::json& result, const std::string& paths) {
    add_blas_core(result);
    result["commit"] = shell("git rev-parse HEAD 2>/dev/null");
    result["dirty"] = !shell("git status --porcelain -- " + paths + " 2>/dev/null").empty();
    result["date"] = shell("date -u +%Y-%m-%dT%H:%M:%SZ");
}

/// Write `result` as indented JSON to out_path (and say so), or print it when out_path is empty.
inline void emit_result(const nlohmann::json& result, const std::string& out_path) {
    if (!out_path.empty()) {
        std::ofstream(out_path) << result.dump(2) << "\n";
        std::printf("wrote %s\n", out_path.c_str());
    } else {
        std::printf("%s\n", result.dump(2).c_str());
    }
}

}  // namespace skew::bench
