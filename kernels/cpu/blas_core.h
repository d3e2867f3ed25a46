// Which OpenBLAS core (kernel set) the CPU matrix products run on. A DYNAMIC_ARCH OpenBLAS picks
// its core from the processor's model number when it loads; an OpenBLAS older than the processor
// does not know the model and may fall back to older kernels (Debian's 0.3.21: SSE3 "Prescott" on
// a Xeon with AVX-512 BF16 and FP16, Sapphire Rapids or newer). skew picks the core from the
// processor's features instead (cpuid) and sets OPENBLAS_CORETYPE before OpenBLAS loads
// (kernels/cpu/process_env.h; docs/cpu-performance.md).
#pragma once
#include <string>
#include <string_view>

namespace skew::cpu {

/// The x86-64 vector extensions that decide which OpenBLAS kernels can run: each one reported by
/// cpuid and, for AVX and AVX-512, its register state enabled by the operating system (XGETBV).
/// All false on other architectures.
struct CpuVectorFeatures {
    bool avx = false;          // AVX (256-bit float)
    bool avx2_fma = false;     // AVX2 and FMA3
    bool avx512 = false;       // AVX-512 F, CD, BW, DQ and VL (Skylake-SP's set)
    bool avx512_bf16 = false;  // AVX512_BF16 (with the set above)
};

/// This processor's features (cpuid leaves 1 and 7, XGETBV).
CpuVectorFeatures cpu_vector_features();

/// The vector level an OpenBLAS core's kernels use, for comparing cores: 1 SSE2/SSE3 (Prescott,
/// Core2, Nehalem, Opteron, ...), 2 AVX (Sandybridge, Bulldozer ... Excavator), 3 AVX2 (Haswell,
/// Zen), 4 AVX-512 (SkylakeX), 5 AVX-512 BF16 (Cooperlake), 6 AMX (SapphireRapids); -1 for a name
/// this table does not know (a newer OpenBLAS's core: never replaced). Case-insensitive.
int blas_core_rank(std::string_view core);

/// The highest-ranked core name OpenBLAS accepts in OPENBLAS_CORETYPE whose kernels `f` can run:
/// "Cooperlake", "SkylakeX", "Haswell" or "Sandybridge"; "" for a processor without AVX.
const char* blas_core_for(const CpuVectorFeatures& f);

/// Whether the loaded OpenBLAS holds kernels for `core` (its kernel table gotoblas_<CORE> is in
/// the library and initialized: a DYNAMIC_ARCH build leaves the cores it was not built for
/// zero). False when OpenBLAS is not a DYNAMIC_ARCH build (OPENBLAS_CORETYPE is ignored then).
bool blas_core_available(const char* core);

/// The core to set in OPENBLAS_CORETYPE, or "" to keep the one OpenBLAS picked by itself
/// (`openblas_alone`): the best of blas_core_for(f) and the lower-ranked fallbacks that `available`
/// says the library holds, when it ranks above openblas_alone's (an unknown openblas_alone is kept).
std::string blas_core_choice(const CpuVectorFeatures& f, std::string_view openblas_alone,
                             bool (*available)(const char* core));

/// The core the loaded OpenBLAS runs (openblas_get_corename), e.g. "Cooperlake".
std::string blas_core_name();

}  // namespace skew::cpu
