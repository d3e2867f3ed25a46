// CUDA MoE dispatch, gather and combine (docs/design.md: dropless top-2 routing; docs/architecture.md, "MoE expert products":
// permute by a stable sort of expert ids). The sort is counting_sort.h (integer, exact); gathers
// and combines sum in slot order, so every result is deterministic. CPU twin: kernels/cpu/moe_dispatch.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/counting_sort.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_dispatch.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void gather_forward_kernel(bf16* __restrict__ xs, const bf16* __restrict__ x,
                                      const int64_t* __restrict__ sorted_to_copy, int64_t nk, int64_t K, int64_t C) {
    for (int64_t e = thread_index(); e < nk * C; e += grid_stride()) {
        const int64_t p = e / C, c = e - p * C;
        xs[e] = x[(sorted_to_copy[p] / K) * C + c];
    }
}

__global__ void gather_backward_kernel(bf16* __restrict__ dx, const bf16* __restrict__ dxs,
                                       const int64_t* __restrict__ copy_to_sorted, int64_t n, int64_t K, int64_t C,
                                       bool accumulate) {
    for (int64_t e = thread_index(); e < n * C; e += grid_stride()) {
        const int64_t t = e / C, c = e - t * C;
        float acc = accumulate ? ld(dx[e]) : 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += ld(dxs[copy_to_sorted[t * K + j] * C + c]);
        st(dx + e, acc);
    }
}

__global__ void combine_forward_kernel(bf16* __restrict__ out, const bf16* __restrict__ ys,
                                       const float* __restrict__ gates, const int64_t* __restrict__ copy_to_sorted,
                                       int64_t n, int64_t K, int64_t C) {
    for (int64_t e = thread_index(); e < n * C; e += grid_stride()) {
        const int64_t t = e / C, c = e - t * C;
        float acc = 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += gates[t * K + j] * ld(ys[copy_to_sorted[t * K + j] * C + c]);
        st(out + e, acc);
    }
}

__global__ void combine_backward_dys_kernel(bf16* __restrict__ dys, const bf16* __restrict__ dout,
                                            const float* __restrict__ gates, const int64_t* __restrict__ copy_to_sorted,
                                            int64_t nk, int64_t K, int64_t C) {
    for (int64_t e = thread_index(); e < nk * C; e += grid_stride()) {
        const int64_t j = e / C, c = e - j * C;
        st(dys + copy_to_sorted[j] * C + c, gates[j] * ld(dout[(j / K) * C + c]));
    }
}

// 8 channels per thread with 16-byte accesses (C % 8 == 0, pointers 16-byte aligned); same math.
__global__ void gather_forward_vec_kernel(bf16* __restrict__ xs, const bf16* __restrict__ x,
                                          const int64_t* __restrict__ sorted_to_copy, int64_t nk, int64_t K,
                                          int64_t C8) {
    for (int64_t e = thread_index(); e < nk * C8; e += grid_stride()) {
        const int64_t p = e / C8, c8 = e - p * C8;
        store8(xs + 8 * e, load8(x + ((sorted_to_copy[p] / K) * C8 + c8) * 8));
    }
}

__global__ void combine_forward_vec_kernel(bf16* __restrict__ out, const bf16* __restrict__ ys,
                                           const float* __restrict__ gates, const int64_t* __restrict__ copy_to_sorted,
                                           int64_t n, int64_t K, int64_t C8) {
    for (int64_t e = thread_index(); e < n * C8; e += grid_stride()) {
        const int64_t t = e / C8, c8 = e - t * C8;
        float acc[8] = {};
        for (int64_t j = 0; j < K; ++j) {
            const float g = gates[t * K + j];
            const Bf16x8 y = load8(ys + (copy_to_sorted[t * K + j] * C8 + c8) * 8);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] += g * ld(y.v[i]);
        }
        Bf16x8 o;
#pragma unroll
        for (int i = 0; i < 8; ++i) st(&o.v[i], acc[i]);
        store8(out + 8 * e, o);
    }
}

// One warp per copy j: dgates[j] = <dout[j / K], ys[copy_to_sorted[j]]>.
__global__ void combine_backward_dgates_kernel(float* __restrict__ dgates, const bf16* __restrict__ dout,
                                               const bf16* __restrict__ ys, const int64_t* __restrict__ copy_to_sorted,
                                               int64_t nk, int64_t K, int64_t C) {
    const int64_t j = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (j >= nk) return;
    const bf16* g = dout + (j / K) * C;
    const bf16* y = ys + copy_to_sorted[j] * C;
    float dot = 0.0f;
    for (int64_t c = lane; c < C; c += 32) dot += ld(g[c]) * ld(y[c]);
    dot = warp_sum(dot);
    if (lane == 0) dgates[j] = dot;
}

}  // namespace

// ---- launchers

int64_t moe_dispatch_scratch_bytes(int64_t n_tokens, int64_t top_k, int64_t n_experts) {
    return cuda_ws::moe_dispatch_scratch_bytes(n_tokens, top_k, n_experts);
}

void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                  int64_t n_tokens, int64_t top_k, int64_t n_experts, int* error_word, void* scratch,
                  cudaStream_t stream) {
    check_nonneg("moe_dispatch n_tokens", n_tokens);
    if (top_k < 1 || n_experts < 1) throw_op_error("moe_dispatch", "top_k and n_experts must be positive");
    counting_sort(sorted_to_copy, copy_to_sorted, offsets, expert_idx, n_tokens * top_k, n_experts, error_word,
                  CUDA_ERR_EXPERT_RANGE, scratch, stream);
}

void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                        int64_t channels, cudaStream_t stream) {
    check_nonneg("moe_gather_forward n_tokens", n_tokens);
    check_nonneg("moe_gather_forward channels", channels);
    const int64_t total = n_tokens * top_k * channels;
    if (total == 0) return;
    if (channels % 8 == 0 && aligned16(xs, x)) {
        gather_forward_vec_kernel<<<grid_for(total / 8, kThreads), kThreads, 0, stream>>>(
            xs, x, sorted_to_copy, n_tokens * top_k, top_k, channels / 8);
        cuda_check_kernel("gather_forward_vec_kernel");
        return;
    }
    gather_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(xs, x, sorted_to_copy, n_tokens * top_k,
                                                                              top_k, channels);
    cuda_check_kernel("gather_forward_kernel");
}

void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                         int64_t channels, bool accumulate, cudaStream_t stream) {
    check_nonneg("moe_gather_backward n_tokens", n_tokens);
    check_nonneg("moe_gather_backward channels", channels);
    const int64_t total = n_tokens * channels;
    if (total == 0) return;
    gather_backward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(dx, dxs, copy_to_sorted, n_tokens, top_k,
                                                                               channels, accumulate);
    cuda_check_kernel("gather_backward_kernel");
}

void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted, int64_t n_tokens,
                         int64_t top_k, int64_t channels, cudaStream_t stream) {
    check_nonneg("moe_combine_forward n_tokens", n_tokens);
    check_nonneg("moe_combine_forward channels", channels);
    const int64_t total = n_tokens * channels;
    if (total == 0) return;
    if (channels % 8 == 0 && aligned16(out, ys)) {
        combine_forward_vec_kernel<<<grid_for(total / 8, kThreads), kThreads, 0, stream>>>(
            out, ys, gates, copy_to_sorted, n_tokens, top_k, channels / 8);
        cuda_check_kernel("combine_forward_vec_kernel");
        return;
    }
    combine_forward_kernel<<<grid_for(total, kThreads), kThreads, 0, stream>>>(out, ys, gates, copy_to_sorted, n_tokens,
                                                                               top_k, channels);
    cuda_check_kernel("combine_forward_kernel");
}

void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                          const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k, int64_t channels,
                          cudaStream_t stream) {
    check_nonneg("moe_combine_backward n_tokens", n_tokens);
    check_nonneg("moe_combine_backward channels", channels);
    const int64_t nk = n_tokens * top_k;
    if (nk == 0) return;
    if (dys && channels > 0) {
        combine_backward_dys_kernel<<<grid_for(nk * channels, kThreads), kThreads, 0, stream>>>(
            dys, dout, gates, copy_to_sorted, nk, top_k, channels);
        cuda_check_kernel("combine_backward_dys_kernel");
    }
    if (dgates) {
        const int64_t threads = nk * 32;
        combine_backward_dgates_kernel<<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            dgates, dout, ys, copy_to_sorted, nk, top_k, channels);
        cuda_check_kernel("combine_backward_dgates_kernel");
    }
}

}  // namespace skew::cuda
