// Helpers shared by the benchmarks: run a shell command and capture its output, and the git commit
// every JSON result is tagged with.
#pragma once
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

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

/// Provenance of a result: "commit", "dirty" (uncommitted changes under `paths`, a git pathspec
/// such as "optim kernels bench") and "date" (UTC, ISO 8601), set on `result`.
inline void add_provenance(nlohmann::json& result, const std::string& paths) {
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
