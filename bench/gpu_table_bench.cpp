// bench_gpu_ops' per-op rows from the op table (bench/gpu_table_bench.h).
#include "bench/gpu_table_bench.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "tests/backend_ops/perf.h"

namespace skew::bench {

namespace {

// The CUDA backend alone (created now: SKEW_GROUPED_GEMM is read when it is made).
std::vector<ops::BackendEntry> cuda_only() {
    auto all = ops::present_backends();
    std::vector<ops::BackendEntry> out;
    for (auto& b : all)
        if (b.name == "cuda") out.push_back(std::move(b));
    if (out.empty()) fail("bench_gpu_ops: the op table has no CUDA backend ({})", ops::backend_absent_reason("cuda"));
    return out;
}

void write_rows(FILE* out, const nlohmann::json& rows, const std::string& algo) {
    if (!out) return;
    for (const auto& r : rows) {
        nlohmann::json line;
        if (r.contains("op")) {
            line = {{"name", "table " + r["op"].get<std::string>() + " " + r["shape"].get<std::string>()},
                    {"op", r["op"]},
                    {"shape", r["shape"]},
                    {"dtypes", r["dtypes"]},
                    {"algo", algo},
                    {"ms", r["us"].get<double>() * 1e-3},
                    {"median_ms", r["median_us"].get<double>() * 1e-3},
                    {"tflops", r["gflops"].get<double>() * 1e-3},
                    {"gbs", r["gbps"]},
                    {"roofline_fraction", r["roofline_fraction"]}};
        } else {
            line = r;
            line["name"] = "table roofline";
        }
        std::fprintf(out, "%s\n", line.dump().c_str());
    }
    std::fflush(out);
}

}  // namespace

int bench_table(FILE* out, bool quick) {
    ops::ModeOptions o;
    ops::PerfOptions p;
    p.min_seconds = quick ? 0.1 : 0.3;
    p.shape_set = "paper";
    int failures = 0;
    {
        auto backends = cuda_only();
        nlohmann::json rows = nlohmann::json::array();
        failures += ops::run_perf_mode(backends, o, p, rows);
        write_rows(out, rows, "per_expert_loop");
    }
    // the grouped expert GEMM's second algorithm (kernels/cuda/cuda_backend.h: SKEW_GROUPED_GEMM)
    const char* prev = std::getenv("SKEW_GROUPED_GEMM");
    const std::string saved = prev ? prev : "";
    setenv("SKEW_GROUPED_GEMM", "cublas_grouped", 1);
    {
        std::printf("grouped expert GEMM under SKEW_GROUPED_GEMM=cublas_grouped:\n");
        auto backends = cuda_only();
        o.filter = "moe_matmul";
        nlohmann::json rows = nlohmann::json::array();
        failures += ops::run_perf_mode(backends, o, p, rows);
        write_rows(out, rows, "cublas_grouped");
    }
    if (prev) setenv("SKEW_GROUPED_GEMM", saved.c_str(), 1);
    else unsetenv("SKEW_GROUPED_GEMM");
    return failures;
}

}  // namespace skew::bench
