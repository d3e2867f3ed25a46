// Launching `skew` under Open MPI from a multi-rank test: `mpirun -np N --oversubscribe skew ARGS`
// with the environment the container needs (run as root, no CMA single-copy, one OpenMP thread),
// bounded by `timeout`, and whether mpirun is installed at all.
#pragma once
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/cli_util.h"

namespace skew::test {

/// `mpirun -np <np> --oversubscribe skew <args>` through the shell, killed after timeout_s seconds
/// (exit status 124): exit status and the ranks' stdout and stderr together.
inline Run mpirun_skew(int np, const std::string& args, int timeout_s = 500) {
    const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                            "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1 timeout " +
                            std::to_string(timeout_s) + " mpirun -np " + std::to_string(np) + " --oversubscribe " +
                            std::string(SKEW_BINARY) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int st = pclose(p);
    return Run{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/// Whether `mpirun` is on PATH.
inline bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

}  // namespace skew::test
