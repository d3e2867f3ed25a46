// Philox4x32-10 counter-based random numbers (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), callable from host and device. Every draw in skew (initialization, router
// noise, stochastic rounding) is a pure function of (seed, stream, step, tensor, element), so the
// CPU and CUDA backends draw the same numbers and a resumed run draws what an uninterrupted one
// would (docs/design.md, "Counter-based randomness").
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/hd.h"

namespace skew {

/// Streams: one per purpose, so that no two uses of randomness share bits.
enum PhiloxStream : uint32_t {
    PHILOX_STREAM_INIT = 1,          // parameter initialization
    PHILOX_STREAM_ROUTER_NOISE = 2,  // router logit noise N(0, sigma^2)
    PHILOX_STREAM_ROUNDING = 3,      // stochastic / dithered rounding of bf16 write-back
    PHILOX_STREAM_GALORE = 4,        // randomized SVD test matrices
};

struct Philox4 {
    uint32_t v[4];
};

/// Philox4x32 with 10 rounds: counter (c0..c3) and key (k0, k1) to four 32-bit words.
SKEW_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
    for (int r = 0; r < 10; ++r) {
        uint64_t p0 = uint64_t(M0) * c0;
        uint64_t p1 = uint64_t(M1) * c2;
        uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
        uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += W0;
        k1 += W1;
    }
    return Philox4{{c0, c1, c2, c3}};
}

/// The key of a random stream: a 64-bit run seed and a stream id (PhiloxStream).
struct PhiloxKey {
    uint64_t seed;
    uint32_t stream;
};

/// Four independent 32-bit words for group `group` (elements 4*group .. 4*group+3) of tensor
/// `tensor` at step `step`. Counter = (group lo, group hi, tensor, step); key = (seed lo,
/// seed hi ^ stream * golden). 64-bit element groups: tensors beyond 2^32 elements are fine.
SKEW_HD Philox4 philox_block(PhiloxKey key, uint32_t step, uint32_t tensor, uint64_t group) {
    return philox4x32_10(uint32_t(group), uint32_t(group >> 32), tensor, step, uint32_t(key.seed),
                         uint32_t(key.seed >> 32) ^ (key.stream * 0x9E3779B9u));
}

/// Word k (0..3) of a block by selects, not a runtime array index: on the device a runtime index
/// into Philox4 forces the block into local memory (a stack frame); the selects keep it in registers.
SKEW_HD uint32_t philox_word(const Philox4& b, uint32_t k) {
    return k == 0u ? b.v[0] : k == 1u ? b.v[1] : k == 2u ? b.v[2] : b.v[3];
}

/// One 32-bit word for element `element` (word element % 4 of group element / 4).
SKEW_HD uint32_t philox_u32(PhiloxKey key, uint32_t step, uint32_t tensor, uint64_t element) {
    return philox_word(philox_block(key, step, tensor, element >> 2), uint32_t(element & 3u));
}

/// Uniform float in [0, 1) from a 32-bit word (top 24 bits; exact multiples of 2^-24).
SKEW_HD float u32_to_uniform(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }

/// Uniform float in (0, 1] from a 32-bit word (safe for log()).
SKEW_HD float u32_to_uniform_open0(uint32_t u) { return (float(u >> 8) + 1.0f) * (1.0f / 16777216.0f); }

/// Standard normal N(0, 1) for element `element` by Box-Muller on the word pair
/// (2*(element % 2), 2*(element % 2) + 1) of group element / 2. CPU and CUDA agree to a few ulp
/// (libm vs CUDA logf/cosf), not bit for bit.
SKEW_HD float philox_normal(PhiloxKey key, uint32_t step, uint32_t tensor, uint64_t element) {
    Philox4 r = philox_block(key, step, tensor, element >> 1);
    const bool hi = (element & 1u) != 0;
    float u1 = u32_to_uniform_open0(hi ? r.v[2] : r.v[0]);
    float u2 = u32_to_uniform(hi ? r.v[3] : r.v[1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

}  // namespace skew
