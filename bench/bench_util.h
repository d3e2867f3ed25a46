// Helpers shared by the benchmarks: run a shell command and capture its output, and the git commit
// every JSON result is tagged with.
#pragma once
#include <cstdio>
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

}  // namespace skew::bench
