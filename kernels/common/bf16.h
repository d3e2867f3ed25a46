// bfloat16 storage type usable on host and device: 1 sign, 8 exponent, 7 mantissa bits, i.e. the
// top 16 bits of an IEEE fp32. Conversions are bit-exact: widening is exact, narrowing rounds to
// nearest even (RNE) with NaN kept NaN (quiet). Stochastic and dithered narrowing: rounding.h.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/common/hd.h"

namespace skew {

/// One bfloat16 value held as its 16-bit pattern (layout-compatible with __nv_bfloat16).
struct bf16 {
    uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

/// The 32-bit pattern of an fp32 value (bit cast, no conversion).
SKEW_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
#endif
}

/// The fp32 value with the given 32-bit pattern (bit cast).
SKEW_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, 4);
    return x;
#endif
}

/// Widen bf16 to fp32 (exact).
SKEW_HD float bf16_to_f32(bf16 h) { return f32_from_bits(uint32_t(h.bits) << 16); }

/// Narrow fp32 to bf16 with round-to-nearest-even; NaN stays NaN (quiet bit set), ±inf stays ±inf,
/// values above the largest finite bf16 by at least half an ulp become ±inf (IEEE semantics, as
/// torch.Tensor.bfloat16() and __float2bfloat16_rn).
SKEW_HD bf16 f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
        return bf16{uint16_t((u >> 16) | 0x0040u)};  // NaN: keep sign, force quiet
    }
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7FFFu + lsb;
    return bf16{uint16_t(u >> 16)};
}

/// True when the bf16 value is NaN.
SKEW_HD bool bf16_isnan(bf16 h) { return (h.bits & 0x7F80u) == 0x7F80u && (h.bits & 0x007Fu) != 0; }

}  // namespace skew
