// backend_ops: one op table for every backend (docs/backend-ops.md). Modes: test (every backend
// against the CPU, the CPU against a double-precision evaluation), grad (finite differences on the
// CPU), perf (time, GFLOP/s, GB/s, fraction of the measured roofline), support, coverage; --list.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "tests/backend_ops/coverage.h"
#include "tests/backend_ops/listing.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/perf.h"
#include "tests/backend_ops/runner.h"

#ifndef SKEW_SOURCE_DIR
#define SKEW_SOURCE_DIR "."
#endif

namespace {
constexpr int SKIP_EXIT_CODE = 77;  // ctest's SKIP_RETURN_CODE (tests/skip.h)
}

int main(int argc, char** argv) {
    CLI::App app{"backend_ops: the op table of every Backend op (docs/backend-ops.md)"};
    std::string mode = "test", backend = "all", source = SKEW_SOURCE_DIR;
    skew::ops::ModeOptions o;
    bool list = false;
    app.add_option("--mode", mode, "test | grad | perf | support | coverage")
        ->check(CLI::IsMember({"test", "grad", "perf", "support", "coverage"}));
    app.add_option("--filter", o.filter, "only ops whose name contains this");
    app.add_option("--backend", backend,
                   "all (every present backend) | cpu | cuda (in test mode with the CPU as its reference; exit 77 "
                   "without a device)")
        ->check(CLI::IsMember({"all", "cpu", "cuda"}));
    app.add_option("--source", source, "repository root (coverage reads kernels/backend.h there)");
    skew::ops::PerfOptions perf;
    app.add_option("--min-seconds", perf.min_seconds, "perf: time each case at least this long");
    app.add_flag("--full-shapes", perf.full_shapes, "perf: the paper's shapes on the CPU too (default: scaled)");
    app.add_option("--shapes", perf.shape_set,
                   "perf: the shape set, paper (the default) | moe10m, or a comma-separated list (one roofline)");
    app.add_flag("--large", o.large,
                 "test: the large rows too (device tile, chunk and layout limits; seconds of double-precision "
                 "reference each)");
    app.add_flag("--json", o.json, "one JSON document instead of lines");
    app.add_flag("--list", list, "list the cases (test, perf and grad) and exit");
    CLI11_PARSE(app, argc, argv);

    try {
        nlohmann::json rows = nlohmann::json::array();
        int failures = 0;
        if (list) {
            skew::ops::run_list(o, rows);
        } else if (mode == "coverage") {
            failures = skew::ops::run_coverage_mode(source);
        } else if (mode == "grad") {
            failures = skew::ops::run_grad_mode(o, rows);
        } else {
            auto backends = skew::ops::present_backends();
            if (backend == "cuda") {
                bool have = false;
                for (auto& b : backends) have = have || b.name == "cuda";
                if (!have) {
                    std::fprintf(stderr, "backend_ops: cuda %s: skipped (exit %d)\n",
                                 skew::ops::backend_absent_reason("cuda").c_str(), SKIP_EXIT_CODE);
                    return SKIP_EXIT_CODE;
                }
                // test mode keeps the CPU as the reference; perf and support time / list CUDA alone
                if (mode != "test") backends.erase(backends.begin());
            } else if (backend == "cpu") {
                backends.resize(1);
            }
            if (mode == "test") failures = skew::ops::run_test_mode(backends, o, rows);
            else if (mode == "perf") {
                perf.print = !o.json;
                failures = skew::ops::run_perf_mode(backends, o, perf, rows);
            } else skew::ops::run_support_mode(backends, o, rows);
        }
        if (o.json)
            std::printf(
                "%s\n",
                nlohmann::json{{"mode", list ? "list" : mode}, {"failures", failures}, {"rows", rows}}.dump(1).c_str());
        else if (!list && mode != "support" && mode != "coverage") std::printf("%d failed\n", failures);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "backend_ops: %s\n", e.what());
        return 2;
    }
}
