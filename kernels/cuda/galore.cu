// GaLore's elementwise GPU kernels (kernels/cuda/galore.h). 16-byte accesses where the range allows;
// no runtime-indexed arrays (no local memory); deterministic.
#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/galore.h"

namespace skew::cuda {

namespace {

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS)
    galore_adam_kernel(float* __restrict__ x, float* __restrict__ m, float* __restrict__ v, int64_t n, float b1,
                       float omb1, float b2, float omb2, float eps) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        float mi = m[i], vi = v[i];
        x[i] = galore_adam_element(x[i], mi, vi, b1, omb1, b2, omb2, eps);
        m[i] = mi;
        v[i] = vi;
    }
}

__global__ void __launch_bounds__(THREADS)
    nonzero_flags_kernel(const float* __restrict__ P, int64_t per, int32_t* __restrict__ flags) {
    __shared__ int smem[32];
    const int64_t e = blockIdx.x;
    int any = 0;
    for (int64_t i = threadIdx.x; i < per; i += THREADS) any |= P[e * per + i] != 0.0f;
    any = block_sum(any, smem);
    if (threadIdx.x == 0) flags[e] = any != 0;
}

/// bf16 weights, 8 elements per step (begin and count multiples of 8).
__global__ void __launch_bounds__(THREADS) write_vec_kernel(bf16* __restrict__ weight, const float* __restrict__ U,
                                                            int64_t begin, int64_t count, OptimWrite wb) {
    for (int64_t q = thread_index(); q < count / 8; q += grid_stride()) {
        const int64_t k = q * 8, el = begin + k;
        const float4 u0 = reinterpret_cast<const float4*>(U + k)[0], u1 = reinterpret_cast<const float4*>(U + k)[1];
        const float u[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
        Bf16x8 w = load8(weight + el);
        uint32_t rw[8];
        optim_write_words8(wb, uint64_t(el), rw);
#pragma unroll
        for (int j = 0; j < 8; ++j) w.v[j] = optim_write_bf16(wb, bf16_to_f32(w.v[j]), u[j], rw[j]);
        store8(weight + el, w);
    }
}

/// bf16 weights, any range.
__global__ void __launch_bounds__(THREADS) write_scalar_kernel(bf16* __restrict__ weight, const float* __restrict__ U,
                                                               int64_t begin, int64_t count, OptimWrite wb) {
    for (int64_t k = thread_index(); k < count; k += grid_stride()) {
        const int64_t el = begin + k;
        weight[el] = optim_write_bf16(wb, bf16_to_f32(weight[el]), U[k], optim_write_word(wb, uint64_t(el)));
    }
}

__global__ void __launch_bounds__(THREADS) write_f32_kernel(float* __restrict__ weight, const float* __restrict__ U,
                                                            int64_t begin, int64_t count, OptimWrite wb) {
    for (int64_t k = thread_index(); k < count; k += grid_stride())
        weight[begin + k] = optim_decayed_target(weight[begin + k], wb.keep, wb.lr, U[k]);
}

}  // namespace

void galore_adam(float* x, float* m, float* v, int64_t n, float b1, float omb1, float b2, float omb2, float eps,
                 cudaStream_t stream) {
    if (n <= 0) return;
    galore_adam_kernel<<<grid_for(n, THREADS), THREADS, 0, stream>>>(x, m, v, n, b1, omb1, b2, omb2, eps);
    cuda_check_kernel("galore_adam_kernel");
}

void galore_nonzero_flags(const float* P, int64_t n_mat, int64_t per, int32_t* flags, cudaStream_t stream) {
    if (n_mat <= 0) return;
    if (n_mat > 2147483647) throw_op_error("galore_nonzero_flags", "more than 2^31 matrices");
    nonzero_flags_kernel<<<unsigned(n_mat), THREADS, 0, stream>>>(P, per, flags);
    cuda_check_kernel("nonzero_flags_kernel");
}

void write_dense_update(const OptimTensor& t, const float* U, int64_t begin, int64_t count, const OptimWrite& w,
                        cudaStream_t stream) {
    if (count <= 0) return;
    if (t.weight_f32) {
        write_f32_kernel<<<grid_for(count, THREADS), THREADS, 0, stream>>>(static_cast<float*>(t.weight), U, begin,
                                                                           count, w);
    } else if (begin % 8 == 0 && count % 8 == 0 && aligned16(static_cast<const bf16*>(t.weight), U)) {
        write_vec_kernel<<<grid_for(count / 8, THREADS), THREADS, 0, stream>>>(static_cast<bf16*>(t.weight), U, begin,
                                                                               count, w);
    } else {
        write_scalar_kernel<<<grid_for(count, THREADS), THREADS, 0, stream>>>(static_cast<bf16*>(t.weight), U, begin,
                                                                              count, w);
    }
    cuda_check_kernel("write_dense_update");
}

}  // namespace skew::cuda
