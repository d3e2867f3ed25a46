// CPU SwiGLU activation h = silu(a) * b and its backward: the inner product of the feed-forward
// w3(silu(w1 x) * w2 x) (docs/design.md, "The paper's model"; dense block and every expert).
// The formulas of kernels/common/activations.h (shared with the CUDA kernels), with the sigmoid's
// exponential taken by exp_nonpos_f32 instead of libm's expf, so the loops vectorize (one clone per
// vector width, SKEW_CPU_CLONES, the same bits on each).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

/// 1 / (1 + e^-x) from e = e^-|x| <= 1 (exp_nonpos_f32: no libm call, no overflow): 1 / (1 + e)
/// for x >= 0, e / (1 + e) below; within a few ulp of sigmoid_f32. The scalar and the lane-wise
/// forms run the same operations, so they give the same results.
inline float sigmoid_scalar(float x) {
    const float e = exp_nonpos_f32(-std::fabs(x));
    const float r = 1.0f / (1.0f + e);
    return x >= 0.0f ? r : e * r;
}
inline __attribute__((always_inline)) void sigmoid_lanes(f32x16& out, const f32x16& x) {
    const f32x16 neg_abs = (f32x16)((u32x16)x | 0x80000000u);
    f32x16 e;
    exp_nonpos_lanes<f32x16, i32x16>(e, neg_abs);
    const f32x16 r = 1.0f / (1.0f + e);
    out = x >= 0.0f ? r : e * r;
}

// Sixteen elements widened to fp32, and stored back (bf16: round to nearest even, NaN kept quiet,
// as f32_to_bf16).
inline __attribute__((always_inline)) void load16(f32x16& v, const float* p) { std::memcpy(&v, p, sizeof(v)); }
inline __attribute__((always_inline)) void load16(f32x16& v, const bf16* p) {
    u16x16 h;
    std::memcpy(&h, p, sizeof(h));
    v = (f32x16)(__builtin_convertvector(h, u32x16) << 16);
}
inline __attribute__((always_inline)) void store16(float* p, const f32x16& v) { std::memcpy(p, &v, sizeof(v)); }
inline __attribute__((always_inline)) void store16(bf16* p, const f32x16& v) {
    const u32x16 u = (u32x16)v;
    const u32x16 rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const u32x16 nan = (u >> 16) | 0x0040u;
    const u16x16 h = __builtin_convertvector((u & 0x7FFFFFFFu) > 0x7F800000u ? nan : rne, u16x16);
    std::memcpy(p, &h, sizeof(h));
}

template <class T>
inline __attribute__((always_inline)) void forward_range(T* h, const T* a, const T* b, int64_t i0, int64_t i1) {
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        f32x16 av, bv, sg;
        load16(av, a + i);
        load16(bv, b + i);
        sigmoid_lanes(sg, av);
        store16(h + i, av * sg * bv);
    }
    for (; i < i1; ++i) {
        const float av = load(a[i]);
        store(h + i, av * sigmoid_scalar(av) * load(b[i]));
    }
}

// silu = a·σ(a), silu' = σ(a)·(1 + a·(1 - σ(a))): one exponential per element
template <class T>
inline __attribute__((always_inline)) void backward_range(T* da, T* db, const T* dh, const T* a, const T* b, int64_t i0,
                                                          int64_t i1) {
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16) {
        f32x16 av, bv, g, sg;
        load16(av, a + i);
        load16(bv, b + i);
        load16(g, dh + i);
        sigmoid_lanes(sg, av);
        store16(da + i, g * bv * (sg * (1.0f + av * (1.0f - sg))));
        store16(db + i, g * (av * sg));
    }
    for (; i < i1; ++i) {
        const float av = load(a[i]), bv = load(b[i]), g = load(dh[i]);
        const float sg = sigmoid_scalar(av);
        store(da + i, g * bv * (sg * (1.0f + av * (1.0f - sg))));
        store(db + i, g * (av * sg));
    }
}

SKEW_CPU_CLONES void forward_bf16(bf16* h, const bf16* a, const bf16* b, int64_t i0, int64_t i1) {
    forward_range(h, a, b, i0, i1);
}
SKEW_CPU_CLONES void forward_f32(float* h, const float* a, const float* b, int64_t i0, int64_t i1) {
    forward_range(h, a, b, i0, i1);
}
SKEW_CPU_CLONES void backward_bf16(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t i0,
                                   int64_t i1) {
    backward_range(da, db, dh, a, b, i0, i1);
}
SKEW_CPU_CLONES void backward_f32(float* da, float* db, const float* dh, const float* a, const float* b, int64_t i0,
                                  int64_t i1) {
    backward_range(da, db, dh, a, b, i0, i1);
}
void forward_any(bf16* h, const bf16* a, const bf16* b, int64_t i0, int64_t i1) { forward_bf16(h, a, b, i0, i1); }
void forward_any(float* h, const float* a, const float* b, int64_t i0, int64_t i1) { forward_f32(h, a, b, i0, i1); }
void backward_any(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t i0, int64_t i1) {
    backward_bf16(da, db, dh, a, b, i0, i1);
}
void backward_any(float* da, float* db, const float* dh, const float* a, const float* b, int64_t i0, int64_t i1) {
    backward_f32(da, db, dh, a, b, i0, i1);
}

/// Elements per OpenMP task: long runs for the vector loop, small enough to balance two threads.
constexpr int64_t BLOCK = 4096;

}  // namespace

template <class T>
void swiglu_forward(T* h, const T* a, const T* b, int64_t n) {
    check_nonneg("swiglu_forward n", n);
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t k = 0; k < blocks; ++k) forward_any(h, a, b, k * BLOCK, std::min(n, (k + 1) * BLOCK));
}

template <class T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, int64_t n) {
    check_nonneg("swiglu_backward n", n);
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t k = 0; k < blocks; ++k) backward_any(da, db, dh, a, b, k * BLOCK, std::min(n, (k + 1) * BLOCK));
}

template void swiglu_forward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_backward<bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);

}  // namespace skew::cpu
