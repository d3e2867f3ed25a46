// The one bf16 write-back path of every optimizer (docs/design.md, "Optimizers"): exact unbiased
// stochastic rounding with Philox bits (docs/optimizers.md §9.1), the paper's dithered
// approximation (Algorithm 1 line 13; its bias: docs/optimizers.md §9.2) and round-to-nearest-even.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/bf16.h"
#include "kernels/common/hd.h"
#include "kernels/common/philox.h"

namespace skew {

/// fp32 multiply, add and subtract rounded on their own (no fused multiply-add on the device), so the
/// CPU loops and the CUDA kernels compute bit-identical values from identical inputs (the host build
/// is ISO C++, which does not contract).
SKEW_HD float rn_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
SKEW_HD float rn_add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
SKEW_HD float rn_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/// Write-back modes, matching skew::Rounding in engine/config.h (kernels do not include engine/).
enum RoundingMode : uint8_t { ROUNDING_STOCHASTIC = 0, ROUNDING_DITHERED = 1, ROUNDING_NEAREST = 2 };

/// Exact stochastic rounding of fp32 x to bf16 given 16 uniform random bits r (0..65535):
/// adds r to the 16 bits bf16 drops and truncates, so P(away from zero) = low16(x) / 2^16 and
/// E[result] = x for every finite x whose rounding stays finite. A value already representable
/// (low 16 bits zero) never moves; NaN stays NaN (quiet, sign kept); ±inf stay ±inf; a finite x
/// whose carry would produce ±inf (|x| above the largest finite bf16, 0x7F7F) is truncated to
/// ±0x7F7F instead (the only biased case: the 2^-16-wide band just under FLT_MAX's bf16 ceiling).
/// Source: llm.c `stochastic_rounding`, torchao `_fp32_to_bf16_sr` (docs/optimizers.md §9.1).
SKEW_HD bf16 bf16_round_stochastic(float x, uint32_t r) {
    uint32_t b = f32_bits(x);
    if ((b & 0x7F800000u) == 0x7F800000u) {
        if (b & 0x007FFFFFu) return bf16{uint16_t((b >> 16) | 0x0040u)};  // NaN (payload may be low bits only)
        return bf16{uint16_t(b >> 16)};                                   // ±inf
    }
    uint32_t sum = b + (r & 0xFFFFu);  // cannot wrap: b < 0xFF800000 here
    uint16_t h = uint16_t(sum >> 16);
    if ((h & 0x7F80u) == 0x7F80u) h = uint16_t(b >> 16);  // carry into inf: keep the truncation
    return bf16{h};
}

/// The paper's dithered rounding (its trainer's `SkewAdam.step`, docs/sources.md; Algorithm 1 line 13):
/// y = RNE(x + xi), xi = (u - 0.5) * |x| * 2^-7 with u uniform in [0, 1) from the 32-bit word r
/// (top 24 bits). Biased toward zero by about u_bf16/8 just above a power of two and u_bf16/4
/// just below the next (docs/optimizers.md §9.2); a representable value with a zero update moves.
/// NaN stays NaN; inf stays inf.
SKEW_HD bf16 bf16_round_dithered(float x, uint32_t r) {
    if ((f32_bits(x) & 0x7F800000u) == 0x7F800000u) return f32_to_bf16(x);  // NaN, inf
    float a = fabsf(x) * 0.0078125f;                                        // 2^-7 |x|
    float xi = rn_mul(u32_to_uniform(r) - 0.5f, a);
    return f32_to_bf16(rn_add(x, xi));
}

/// Round-to-nearest-even (the plain cast, as torch's copy_ into bf16).
SKEW_HD bf16 bf16_round_nearest(float x) { return f32_to_bf16(x); }

/// The rounding noise word of element `element` of tensor `tensor` (ParamInfo::index) at
/// optimizer step `step`: Philox stream PHILOX_STREAM_ROUNDING, so no two tensors, steps or
/// elements share bits and a resumed run draws what an uninterrupted one would. 64-bit element.
SKEW_HD uint32_t rounding_bits(uint64_t seed, uint32_t step, uint32_t tensor, uint64_t element) {
    return philox_u32(PhiloxKey{seed, PHILOX_STREAM_ROUNDING}, step, tensor, element);
}

/// Round fp32 x to bf16 with `mode` given its random word r (rounding_bits; ignored for nearest):
/// the one choice between the three roundings, for loops that draw one Philox block per four elements.
SKEW_HD bf16 bf16_round_bits(float x, RoundingMode mode, uint32_t r) {
    if (mode == ROUNDING_NEAREST) return bf16_round_nearest(x);
    return mode == ROUNDING_STOCHASTIC ? bf16_round_stochastic(x, r) : bf16_round_dithered(x, r);
}

/// Write fp32 x back to bf16 with `mode`; the random word is drawn only for the modes that use it.
SKEW_HD bf16 bf16_write_back(float x, RoundingMode mode, uint64_t seed, uint32_t step, uint32_t tensor,
                             uint64_t element) {
    if (mode == ROUNDING_NEAREST) return bf16_round_nearest(x);
    return bf16_round_bits(x, mode, rounding_bits(seed, step, tensor, element));
}

}  // namespace skew
