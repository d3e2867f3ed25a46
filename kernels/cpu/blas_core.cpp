// OpenBLAS core selection from the processor's features (kernels/cpu/blas_core.h): cpuid and
// XGETBV for the vector extensions, a rank per OpenBLAS core name, and the check that the loaded
// library holds a core's kernels.
#include "kernels/cpu/blas_core.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

// OpenBLAS's own queries (declared here: the cblas.h in use may be another BLAS's).
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace skew::cpu {

namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

#if defined(__x86_64__)
uint64_t xgetbv0() {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
}
#endif

/// The cores skew sets, best first, each with the features its kernels need.
struct LadderCore {
    const char* name;
    bool (*runs_on)(const CpuVectorFeatures&);
};
constexpr LadderCore LADDER[] = {
    {"Cooperlake", [](const CpuVectorFeatures& f) { return f.avx512 && f.avx512_bf16; }},
    {"SkylakeX", [](const CpuVectorFeatures& f) { return f.avx512; }},
    {"Haswell", [](const CpuVectorFeatures& f) { return f.avx2_fma; }},
    {"Sandybridge", [](const CpuVectorFeatures& f) { return f.avx; }},
};

}  // namespace

CpuVectorFeatures cpu_vector_features() {
    CpuVectorFeatures f;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12);
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return f;  // XMM and YMM state
    f.avx = true;
    if (__get_cpuid_max(0, nullptr) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_subleaf = a;
    f.avx2_fma = (b & (1u << 5)) && fma;
    const unsigned avx512_set = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);  // F DQ CD BW VL
    f.avx512 = (b & avx512_set) == avx512_set && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM state
    if (f.avx512 && max_subleaf >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512_bf16 = a & (1u << 5);
    }
#endif
    return f;
}

int blas_core_rank(std::string_view core) {
    static const struct {
        const char* name;
        int rank;
    } RANKS[] = {
        {"katmai", 1},         {"coppermine", 1},  {"northwood", 1},    {"prescott", 1},   {"banias", 1},
        {"atom", 1},           {"core2", 1},       {"penryn", 1},       {"dunnington", 1}, {"nehalem", 1},
        {"athlon", 1},         {"opteron", 1},     {"opteron_sse3", 1}, {"barcelona", 1},  {"nano", 1},
        {"bobcat", 1},         {"sandybridge", 2}, {"bulldozer", 2},    {"piledriver", 2}, {"steamroller", 2},
        {"excavator", 2},      {"haswell", 3},     {"zen", 3},          {"skylakex", 4},   {"cooperlake", 5},
        {"sapphirerapids", 6},
    };
    const std::string c = lower(core);
    for (const auto& r : RANKS)
        if (c == r.name) return r.rank;
    return -1;
}

const char* blas_core_for(const CpuVectorFeatures& f) {
    for (const LadderCore& l : LADDER)
        if (l.runs_on(f)) return l.name;
    return "";
}

bool blas_core_available(const char* core) {
    const char* config = openblas_get_config();
    if (!config || !std::strstr(config, "DYNAMIC_ARCH")) return false;
    std::string sym = "gotoblas_";
    for (const char* p = core; *p; ++p) sym += char(std::toupper(static_cast<unsigned char>(*p)));
    const auto* table = static_cast<const unsigned char*>(dlsym(RTLD_DEFAULT, sym.c_str()));
    // A core the build left out is a zeroed placeholder; a built one starts with its nonzero
    // blocking parameters (gotoblas_t's dtb_entries, offsets, alignment).
    return table && std::any_of(table, table + 64, [](unsigned char b) { return b != 0; });
}

std::string blas_core_choice(const CpuVectorFeatures& f, std::string_view openblas_alone,
                             bool (*available)(const char* core)) {
    const int alone = blas_core_rank(openblas_alone);
    if (alone < 0) return "";  // a core this table does not know: OpenBLAS knows better
    for (const LadderCore& l : LADDER) {
        if (!l.runs_on(f) || !available(l.name)) continue;
        return blas_core_rank(l.name) > alone ? l.name : "";
    }
    return "";
}

std::string blas_core_name() {
    const char* name = openblas_get_corename();
    return name ? std::string(name) : std::string();
}

}  // namespace skew::cpu
