// --mode perf (tests/backend_ops/perf.h).
#include "tests/backend_ops/perf.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tests/backend_ops/roofline.h"

namespace skew::ops {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int run_perf_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, const PerfOptions& p,
                  nlohmann::json& rows) {
    int failures = 0;
    for (auto& b : backends) {
        const bool gpu = b.be->device_memory();
        // every set of the comma-separated list against one roofline; an unknown set fails first
        std::vector<TableOptions> sets;
        bool scaled = false;
        for (size_t at = 0; at <= p.shape_set.size();) {
            const size_t end = std::min(p.shape_set.find(',', at), p.shape_set.size());
            TableOptions to;
            to.perf = true;
            to.cpu_scaled = !gpu && !p.full_shapes;
            to.shape_set = p.shape_set.substr(at, end - at);
            scaled = perf_dims(to).scaled || scaled;
            sets.push_back(to);
            at = end + 1;
        }
        const Roofline roof = measure_roofline(b);
        rows.push_back({{"backend", b.name},
                        {"roofline_gflops", roof.flops_per_s * 1e-9},
                        {"gemm", roof.gemm},
                        {"roofline_gbps", roof.bytes_per_s * 1e-9},
                        {"copy", roof.copy},
                        {"shape_set", p.shape_set},
                        {"scaled", scaled}});
        if (p.print)
            std::printf("roofline %s: %.1f GFLOP/s (%s), %.1f GB/s (%s)%s\n", b.name.c_str(), roof.flops_per_s * 1e-9,
                        roof.gemm.c_str(), roof.bytes_per_s * 1e-9, roof.copy.c_str(),
                        scaled ? "; paper shapes scaled to 1 x 128 tokens and 8 experts on the CPU" : "");
        for (const TableOptions& to : sets)
            for (const Case& c : all_cases(to)) {
                if (!o.filter.empty() && c.op.find(o.filter) == std::string::npos) continue;
                if (c.supports && !c.supports(traits_of(*b.be))) continue;
                // The fastest of the timed runs (and their median): on a shared machine the fastest is
                // the one least disturbed by other work.
                double seconds = 0.0, median = 0.0;
                int reps = 0;
                try {
                    DeviceBufs bufs(*b.be, c.t, c.misalign_bytes);
                    c.run(*b.be, bufs);  // warm-up (plans, pages)
                    b.be->synchronize();
                    std::vector<double> times;
                    const double t0 = now();
                    do {
                        const double t1 = now();
                        c.run(*b.be, bufs);
                        b.be->synchronize();
                        times.push_back(now() - t1);
                    } while (now() - t0 < p.min_seconds && times.size() < 1000);
                    reps = int(times.size());
                    std::sort(times.begin(), times.end());
                    seconds = times.front();
                    median = times[times.size() / 2];
                } catch (const std::exception& e) {
                    std::printf("FAIL %-24s %-6s %s: threw: %s\n", c.op.c_str(), b.name.c_str(), c.shape.c_str(),
                                e.what());
                    ++failures;
                    continue;
                }
                const double frac = roofline_fraction(roof, c.flops, c.bytes, seconds);
                rows.push_back({{"op", c.op},
                                {"shape", c.shape},
                                {"dtypes", c.dtypes},
                                {"backend", b.name},
                                {"us", seconds * 1e6},
                                {"median_us", median * 1e6},
                                {"gflops", c.flops / seconds * 1e-9},
                                {"gbps", c.bytes / seconds * 1e-9},
                                {"flops", c.flops},
                                {"bytes", c.bytes},
                                {"roofline_fraction", frac},
                                {"reps", reps}});
                if (p.print)
                    std::printf("%-22s %-6s %-56s %11.1f us %9.1f GFLOP/s %8.1f GB/s %5.1f%% of roofline\n",
                                c.op.c_str(), b.name.c_str(), c.shape.c_str(), seconds * 1e6, c.flops / seconds * 1e-9,
                                c.bytes / seconds * 1e-9, 100.0 * frac);
                std::fflush(stdout);
            }
    }
    return failures;
}

}  // namespace skew::ops
