// CUDA SwiGLU activation forward and backward (docs/design.md, "The paper's model"), elementwise with
// the activation formulas of kernels/common/activations.h. CPU twin: kernels/cpu/swiglu.cpp.
#include "kernels/common/activations.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/swiglu.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void swiglu_forward_kernel(bf16* __restrict__ h, const bf16* __restrict__ a, const bf16* __restrict__ b,
                                      int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) st(h + i, silu_f32(ld(a[i])) * ld(b[i]));
}

// da may be a and db may be b (in place: deferred expert gradients), so those four carry no
// __restrict__; each element's three inputs are loaded before its outputs are stored.
__global__ void swiglu_backward_kernel(bf16* da, bf16* db, const bf16* __restrict__ dh, const bf16* a, const bf16* b,
                                       int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const float av = ld(a[i]), bv = ld(b[i]), g = ld(dh[i]);
        st(db + i, g * silu_f32(av));
        st(da + i, g * bv * silu_grad_f32(av));
    }
}

// 8 elements per thread with 16-byte accesses (n % 8 == 0, pointers 16-byte aligned); same math.
__global__ void swiglu_forward_vec_kernel(bf16* __restrict__ h, const bf16* __restrict__ a, const bf16* __restrict__ b,
                                          int64_t n8) {
    for (int64_t i = thread_index(); i < n8; i += grid_stride()) {
        const Bf16x8 av = load8(a + 8 * i), bv = load8(b + 8 * i);
        Bf16x8 hv;
#pragma unroll
        for (int j = 0; j < 8; ++j) st(&hv.v[j], silu_f32(ld(av.v[j])) * ld(bv.v[j]));
        store8(h + 8 * i, hv);
    }
}

__global__ void swiglu_backward_vec_kernel(bf16* da, bf16* db, const bf16* __restrict__ dh, const bf16* a,
                                           const bf16* b, int64_t n8) {
    for (int64_t i = thread_index(); i < n8; i += grid_stride()) {
        const Bf16x8 av = load8(a + 8 * i), bv = load8(b + 8 * i), gv = load8(dh + 8 * i);
        Bf16x8 dav, dbv;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float x = ld(av.v[j]), y = ld(bv.v[j]), g = ld(gv.v[j]);
            st(&dbv.v[j], g * silu_f32(x));
            st(&dav.v[j], g * y * silu_grad_f32(x));
        }
        store8(da + 8 * i, dav);
        store8(db + 8 * i, dbv);
    }
}

}  // namespace

// ---- launchers

void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
    check_nonneg("swiglu_forward n", n);
    if (n == 0) return;
    if (n % 8 == 0 && aligned16(h, a, b)) {
        swiglu_forward_vec_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, stream>>>(h, a, b, n / 8);
        cuda_check_kernel("swiglu_forward_vec_kernel");
        return;
    }
    swiglu_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(h, a, b, n);
    cuda_check_kernel("swiglu_forward_kernel");
}

void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
    check_nonneg("swiglu_backward n", n);
    if (n == 0) return;
    if (n % 8 == 0 && aligned16(da, db, dh, a, b)) {
        swiglu_backward_vec_kernel<<<grid_for(n / 8, kThreads), kThreads, 0, stream>>>(da, db, dh, a, b, n / 8);
        cuda_check_kernel("swiglu_backward_vec_kernel");
        return;
    }
    swiglu_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(da, db, dh, a, b, n);
    cuda_check_kernel("swiglu_backward_kernel");
}

}  // namespace skew::cuda
