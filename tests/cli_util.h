// Running the built `skew` binary from a test as a user would: arguments in, exit status and the
// combined stdout/stderr out. The program is skew_binary() (tests/test_paths.h).
#pragma once
#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "tests/test_paths.h"

namespace skew::test {

struct Run {
    int status;          // exit status, -1 if killed by a signal
    std::string output;  // stdout and stderr together
};

/// Run a shell command line and wait for it: exit status and its stdout and stderr together.
inline Run run_shell(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    return Run{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/// Run `skew <args>` through the shell and wait for it; with `dir`, in that working directory.
inline Run run_skew(const std::string& args, const std::string& dir = "") {
    return run_shell((dir.empty() ? "" : "cd '" + dir + "' && ") + skew_binary() + " " + args);
}

}  // namespace skew::test
