// The OpenBLAS core choice (kernels/cpu/blas_core.h): the rank of every core name, the best core for
// a processor's features, when skew replaces OpenBLAS's own pick, and cpuid read against the
// kernel's view of the processor (/proc/cpuinfo).
#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "kernels/cpu/blas_core.h"
#include "tests/skip.h"

using skew::cpu::blas_core_choice;
using skew::cpu::blas_core_for;
using skew::cpu::blas_core_rank;
using skew::cpu::CpuVectorFeatures;

namespace {

// The processors of the measurements: a Xeon with AVX-512 BF16 and FP16 (Sapphire Rapids or newer), an AMD
// EPYC Zen 5 (AVX-512 with BF16), an AVX2 machine, an AVX-only one, an SSE-only one.
constexpr CpuVectorFeatures XEON_SPR{true, true, true, true};
constexpr CpuVectorFeatures SKYLAKE_SP{true, true, true, false};
constexpr CpuVectorFeatures AVX2{true, true, false, false};
constexpr CpuVectorFeatures AVX_ONLY{true, false, false, false};
constexpr CpuVectorFeatures SSE_ONLY{};

bool every_core(const char*) { return true; }
bool no_cooperlake(const char* core) { return std::string(core) != "Cooperlake"; }
bool no_core(const char*) { return false; }

}  // namespace

TEST_CASE("OpenBLAS core names rank by the vector extensions their kernels use, any case, unknown -1") {
    CHECK(blas_core_rank("Prescott") == 1);
    CHECK(blas_core_rank("Nehalem") == 1);
    CHECK(blas_core_rank("Sandybridge") == 2);
    CHECK(blas_core_rank("Excavator") == 2);
    CHECK(blas_core_rank("Haswell") == 3);
    CHECK(blas_core_rank("Zen") == 3);
    CHECK(blas_core_rank("SkylakeX") == 4);
    CHECK(blas_core_rank("COOPERLAKE") == 5);
    CHECK(blas_core_rank("cooperlake") == 5);
    CHECK(blas_core_rank("SapphireRapids") == 6);
    CHECK(blas_core_rank("Zen4") == -1);
    CHECK(blas_core_rank("") == -1);
}

TEST_CASE("the best core for a processor's features: Cooperlake, SkylakeX, Haswell, Sandybridge or none") {
    CHECK(std::string(blas_core_for(XEON_SPR)) == "Cooperlake");
    CHECK(std::string(blas_core_for(SKYLAKE_SP)) == "SkylakeX");
    CHECK(std::string(blas_core_for(AVX2)) == "Haswell");
    CHECK(std::string(blas_core_for(AVX_ONLY)) == "Sandybridge");
    CHECK(std::string(blas_core_for(SSE_ONLY)).empty());
}

TEST_CASE("skew replaces OpenBLAS's own core only with a higher-ranked one the library holds") {
    // Debian's OpenBLAS 0.3.21 on that Xeon picks Prescott (SSE3)
    CHECK(blas_core_choice(XEON_SPR, "Prescott", every_core) == "Cooperlake");
    CHECK(blas_core_choice(XEON_SPR, "Prescott", no_cooperlake) == "SkylakeX");
    CHECK(blas_core_choice(XEON_SPR, "Haswell", every_core) == "Cooperlake");
    CHECK(blas_core_choice(AVX2, "Prescott", every_core) == "Haswell");
    // its own pick kept: as good, better (a newer OpenBLAS), or a name this table does not know
    CHECK(blas_core_choice(XEON_SPR, "Cooperlake", every_core).empty());
    CHECK(blas_core_choice(XEON_SPR, "SapphireRapids", every_core).empty());
    CHECK(blas_core_choice(AVX2, "Zen", every_core).empty());
    CHECK(blas_core_choice(XEON_SPR, "Zen4", every_core).empty());
    CHECK(blas_core_choice(XEON_SPR, "Prescott", no_core).empty());  // not a DYNAMIC_ARCH build
    CHECK(blas_core_choice(SSE_ONLY, "Prescott", every_core).empty());
    // only cores whose kernels the processor runs: an AVX2 machine never gets SkylakeX
    CHECK(blas_core_choice(AVX2, "Sandybridge", every_core) == "Haswell");
}

TEST_CASE("cpuid's vector extensions match the flags /proc/cpuinfo lists") {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    std::set<std::string> flags;
    while (std::getline(in, line))
        if (line.rfind("flags", 0) == 0) {
            std::istringstream words(line.substr(line.find(':') + 1));
            for (std::string w; words >> w;) flags.insert(w);
            break;
        }
    if (flags.empty()) SKEW_SKIP_TEST("no /proc/cpuinfo flags line (not an x86 Linux)");
    auto has = [&](const char* f) { return flags.count(f) > 0; };
    const CpuVectorFeatures f = skew::cpu::cpu_vector_features();
    CHECK(f.avx == has("avx"));
    CHECK(f.avx2_fma == (has("avx2") && has("fma")));
    CHECK(f.avx512 == (has("avx512f") && has("avx512cd") && has("avx512bw") && has("avx512dq") && has("avx512vl")));
    CHECK(f.avx512_bf16 == (f.avx512 && has("avx512_bf16")));
}

TEST_CASE("the loaded OpenBLAS holds the kernels of the core it runs and none of a core it was not built for") {
    const std::string core = skew::cpu::blas_core_name();
    INFO("core " << core);
    CHECK(blas_core_rank(core) >= 1);
    CHECK(skew::cpu::blas_core_available(core.c_str()));
    CHECK(skew::cpu::blas_core_available("Prescott"));
    CHECK_FALSE(skew::cpu::blas_core_available("Athlon"));  // a 32-bit core: a zeroed placeholder
    CHECK_FALSE(skew::cpu::blas_core_available("NoSuchCore"));
}
