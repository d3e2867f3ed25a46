// GPU test of the NVTX ranges' self-timing (kernels/cuda/nvtx.h, docs/profiling.md): inside a
// profiler window every range records its span on the GPU timeline; the table at profiler_stop
// names each range path once (steps merged), counts its calls and gives its time per step, and
// sums the optimizer's per-tensor ranges by tier. The timed work is a device memset of known size.
#include <cuda_runtime_api.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kernels/cuda/nvtx.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("gpu NVTX ranges time themselves inside the profiler window", "[gpu][profiling]") {
    SKEW_REQUIRE_GPU();
#if !defined(SKEW_HAVE_NVTX)
    WARN("built without nvtx3 headers: ranges are no-ops");
    return;
#else
    const std::string path = (std::filesystem::temp_directory_path() / "skew_range_times_test.tsv").string();
    auto& st = cuda::range_times::state();
    const bool was_enabled = st.enabled;
    const std::string was_out = st.out;
    st.enabled = true;
    st.out = path;
    Dev<uint8_t> buf(size_t(1) << 30);
    gpu().synchronize();
    {
        SKEW_NVTX_RANGE("outside the window");  // opened before start: never timed
        cuda::profiler_start();
        for (int step = 1; step <= 2; ++step) {
            SKEW_NVTX_RANGE(("step " + std::to_string(step)).c_str());
            {
                SKEW_NVTX_RANGE("forward");
                for (int i = 0; i < 4; ++i) cudaMemsetAsync(buf.p, i, size_t(1) << 30, gpu().stream());
            }
            SKEW_NVTX_RANGE("optimizer");
            for (const char* t : {"optimizer device a", "optimizer device b", "optimizer host c"}) {
                SKEW_NVTX_RANGE(t);
                cudaMemsetAsync(buf.p, 1, size_t(1) << 20, gpu().stream());
            }
            if (step == 2) {
                gpu().synchronize();
                cuda::profiler_stop();  // "step 2" and "optimizer" still open: closed here
            }
        }
    }
    st.enabled = was_enabled;
    st.out = was_out;

    std::ifstream f(path);
    REQUIRE(f.good());
    std::map<std::string, std::pair<long, double> > rows;
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream is(line);
        std::string name, calls, ms;
        std::getline(is, name, '\t');
        std::getline(is, calls, '\t');
        std::getline(is, ms, '\t');
        while (!name.empty() && name.back() == ' ') name.pop_back();
        if (name == "range") continue;
        rows[name] = {std::stol(calls), std::stod(ms)};
    }
    std::filesystem::remove(path);
    CHECK(rows.count("outside the window") == 0);
    REQUIRE(rows.count("step") == 1);
    REQUIRE(rows.count("step/forward") == 1);
    CHECK(rows["step"].first == 2);
    CHECK(rows["step/forward"].first == 2);
    CHECK(rows["step/optimizer/optimizer device a"].first == 2);
    CHECK(rows["tier total: optimizer device"].first == 4);
    CHECK(rows["tier total: optimizer host"].first == 2);
    // 4 GiB of memset per step at a few TB/s: a few hundred microseconds to a few milliseconds
    const double fwd = rows["step/forward"].second;
    INFO("forward " << fwd << " ms per step");
    CHECK(fwd > 0.2);
    CHECK(fwd < 50.0);
    CHECK(rows["step"].second >= fwd);
#endif
}
