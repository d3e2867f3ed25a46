// Launchers of the tensor-core attention kernels (attention_mma.cuh): dynamic shared memory,
// grids, head_dim dispatch.
#include <cmath>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_check.h"

namespace skew::cuda {

namespace {

using namespace attention_mma;

// Dynamic shared memory of each kernel (bytes).
template <int D, int KN>
constexpr int forward_smem_bytes() {
    return (kTileM + 4 * KN) * stride<D>() * 2;
}
template <int D, int KN>
constexpr int dq_smem_bytes() {
    return (2 * kTileM + 4 * KN) * stride<D>() * 2;
}
template <int D>
constexpr int dkdv_smem_bytes() {
    return (2 * kTileN + 4 * kStepM) * stride<D>() * 2 + 4 * kStepM * 4;
}

// Raise a kernel's dynamic shared memory limit above the default 48 KiB (a per-device setting:
// set before every launch, a host-side call of about a microsecond).
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D, int KN>
void forward_launch(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                    cudaStream_t stream) {
    constexpr int smem = forward_smem_bytes<D, KN>();
    allow_smem(attention_forward_mma_kernel<D, KN>, smem);
    const float scale = 1.0f / std::sqrt(float(D));
    const dim3 grid(unsigned(s.batch * s.n_heads), unsigned((s.seq_len + kTileM - 1) / kTileM));
    attention_forward_mma_kernel<D, KN><<<grid, kThreads, smem, stream>>>(
        out, lse, q, k, v, int(s.seq_len), int(s.keys()), int(s.n_heads), int(s.n_kv_heads), scale, scale * kLog2e);
    cuda_check_kernel("attention_forward_mma_kernel");
}

template <int D, int KN>
void backward_launch(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                     const float* lse, const float* dvec, const AttentionShape& s, cudaStream_t stream) {
    constexpr int smem_kv = dkdv_smem_bytes<D>(), smem_q = dq_smem_bytes<D, KN>();
    allow_smem(attention_backward_dkdv_mma_kernel<D>, smem_kv);
    allow_smem(attention_backward_dq_mma_kernel<D, KN>, smem_q);
    const float scale = 1.0f / std::sqrt(float(D));
    const int T = int(s.seq_len), H = int(s.n_heads), KV = int(s.n_kv_heads);
    const dim3 grid_kv(unsigned(s.batch * KV), unsigned((T + kTileN - 1) / kTileN));
    attention_backward_dkdv_mma_kernel<D>
        <<<grid_kv, kThreads, smem_kv, stream>>>(dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale, scale * kLog2e);
    cuda_check_kernel("attention_backward_dkdv_mma_kernel");
    const dim3 grid_q(unsigned(s.batch * H), unsigned((T + kTileM - 1) / kTileM));
    attention_backward_dq_mma_kernel<D, KN>
        <<<grid_q, kThreads, smem_q, stream>>>(dq, dout, q, k, v, lse, dvec, T, H, KV, scale, scale * kLog2e);
    cuda_check_kernel("attention_backward_dq_mma_kernel");
}

template <int KN>
void forward_dispatch(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                      cudaStream_t stream) {
    switch (s.head_dim) {
        case 16: forward_launch<16, KN>(out, lse, q, k, v, s, stream); break;
        case 32: forward_launch<32, KN>(out, lse, q, k, v, s, stream); break;
        case 64: forward_launch<64, KN>(out, lse, q, k, v, s, stream); break;
        default: forward_launch<128, KN>(out, lse, q, k, v, s, stream);
    }
}

template <int KN>
void backward_dispatch(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                       const float* lse, const float* dvec, const AttentionShape& s, cudaStream_t stream) {
    switch (s.head_dim) {
        case 16: backward_launch<16, KN>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream); break;
        case 32: backward_launch<32, KN>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream); break;
        case 64: backward_launch<64, KN>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream); break;
        default: backward_launch<128, KN>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream);
    }
}

}  // namespace

bool attention_mma_supports(const AttentionShape& s) {
    const bool dim_ok = s.head_dim == 16 || s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128;
    // grid.y holds the tiles (<= 65535); int indices hold T, kv_len and H.
    return dim_ok && s.seq_len <= int64_t(65535) * kTileM && s.keys() <= int64_t(65535) * kTileM &&
           s.n_heads <= (int64_t(1) << 30) && s.batch * s.n_heads < (int64_t(1) << 31);
}

void attention_forward_mma(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                           cudaStream_t stream, int key_tile) {
    if (key_tile == 32) forward_dispatch<32>(out, lse, q, k, v, s, stream);
    else forward_dispatch<64>(out, lse, q, k, v, s, stream);
}

void attention_backward_mma(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const float* lse, const float* dvec, const AttentionShape& s, cudaStream_t stream,
                            int key_tile) {
    if (key_tile == 32) backward_dispatch<32>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream);
    else backward_dispatch<64>(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream);
}

}  // namespace skew::cuda
