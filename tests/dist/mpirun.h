// Launching `skew` under Open MPI from a multi-rank test: `mpirun --oversubscribe` with the
// environment the container needs (run as root, no CMA single-copy), bounded by `timeout`; whether
// mpirun is installed at all; and each test binary's work folder with the prepared sample corpus.
#pragma once
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/cli_util.h"
#include "tests/temp_dir.h"

namespace skew::test {

/// The environment every mpirun of the tests needs, set in this process (inherited by children):
/// Open MPI run as root (containers, CI) and no CMA single-copy (containers without it).
inline void set_mpi_test_env() {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
}

/// `timeout <timeout_s> mpirun --oversubscribe <spec>` through the shell (spec: "-np N PROGRAM ARGS",
/// MPMD specs with ':' too), killed after timeout_s seconds (exit status 124): exit status and the
/// ranks' stdout and stderr together. one_omp_thread: OMP_NUM_THREADS=1 for every rank.
inline Run mpirun_spec(const std::string& spec, int timeout_s = 500, bool one_omp_thread = false) {
    set_mpi_test_env();
    return run_shell(std::string(one_omp_thread ? "OMP_NUM_THREADS=1 " : "") + "timeout " + std::to_string(timeout_s) +
                     " mpirun --oversubscribe " + spec);
}

/// `mpirun -np <np> --oversubscribe skew <args>`, one OpenMP thread per rank (mpirun_spec).
inline Run mpirun_skew(int np, const std::string& args, int timeout_s = 500) {
    return mpirun_spec("-np " + std::to_string(np) + " " + skew_binary() + " " + args, timeout_s, true);
}

/// Whether `mpirun` is on PATH.
inline bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

/// This test process's folder for runs, <temp root>/<name>-<pid> (created).
inline std::string dist_work_dir(const std::string& name) {
    const std::string d = (test_temp_root() / (name + "-" + std::to_string(getpid()))).string();
    std::filesystem::create_directories(d);
    return d;
}

/// tests/fixtures/train/sample.jsonl prepared (`skew prepare`, the GPT-2 fixture tokenizer) into
/// <work_dir>/prep, once per folder; returns that folder.
inline std::string prepared_sample(const std::string& work_dir) {
    const std::string out = work_dir + "/prep", src = source_dir();
    if (std::filesystem::exists(out + "/manifest.json")) return out;
    Run r = run_skew("prepare --input " + src + "/tests/fixtures/train/sample.jsonl --out " + out + " --tokenizer " +
                     src + "/tests/fixtures/data/gpt2 --no-progress");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
}

}  // namespace skew::test
