// CUDA causal grouped-query attention (docs/design.md, "The paper's model"): the public launchers
// of attention.h. They check the shape, run the tensor-core kernels (attention_mma.cu) and fall
// back to the CUDA-core kernels (attention_simt.cu) when a pointer is not 16-byte aligned or the
// shape is past the tensor-core kernels' grid limits; the backward's D = <dout, out> is formed here.
#include "kernels/common/attention_head_dims.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

// dvec[b, h, t] = <dout[b, t, h, :], out[b, t, h, :]> in fp32 (one warp per row).
__global__ void attention_dvec_kernel(float* __restrict__ dvec, const bf16* __restrict__ dout,
                                      const bf16* __restrict__ out, int64_t B, int64_t T, int64_t H, int64_t D) {
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;  // (b, t, h) order
    const int lane = threadIdx.x & 31;
    if (row >= B * T * H) return;
    float s = 0.0f;
    for (int64_t d = lane; d < D; d += 32) s += ld(dout[row * D + d]) * ld(out[row * D + d]);
    s = warp_sum(s);
    if (lane == 0) {
        const int64_t h = row % H, bt = row / H, t = bt % T, b = bt / T;
        dvec[(b * H + h) * T + t] = s;
    }
}

// The same with 16-byte loads: CH = D / 8 consecutive threads per row (CH a power of two <= 32),
// each reading 8 bf16 of dout and of out, summed over the row by a shuffle tree. dout and out
// 16-byte aligned.
template <int CH>
__global__ void attention_dvec_vec_kernel(float* __restrict__ dvec, const bf16* __restrict__ dout,
                                          const bf16* __restrict__ out, int64_t rows, int64_t T, int64_t H) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t row = i / CH;  // (b, t, h) order; all CH threads of a row are in one warp
    float s = 0.0f;
    if (row < rows) {
        const Bf16x8 a = load8(dout + i * 8), c = load8(out + i * 8);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += ld(a.v[e]) * ld(c.v[e]);
    }
#pragma unroll
    for (int o = CH / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && i % CH == 0) {
        const int64_t h = row % H, bt = row / H, t = bt % T, b = bt / T;
        dvec[(b * H + h) * T + t] = s;
    }
}

// dvec for every row; the vectorized kernel when the pointers and head_dim allow it.
void attention_dvec(float* dvec, const bf16* dout, const bf16* out, int64_t B, int64_t T, int64_t H, int64_t D,
                    cudaStream_t stream) {
    const int64_t rows = B * T * H;
    if (aligned16(dout, out) && (D == 16 || D == 32 || D == 64 || D == 128)) {
        const int64_t threads = rows * (D / 8);
        const unsigned grid = unsigned((threads + 255) / 256);
        switch (D) {
            case 16: attention_dvec_vec_kernel<2><<<grid, 256, 0, stream>>>(dvec, dout, out, rows, T, H); break;
            case 32: attention_dvec_vec_kernel<4><<<grid, 256, 0, stream>>>(dvec, dout, out, rows, T, H); break;
            case 64: attention_dvec_vec_kernel<8><<<grid, 256, 0, stream>>>(dvec, dout, out, rows, T, H); break;
            default: attention_dvec_vec_kernel<16><<<grid, 256, 0, stream>>>(dvec, dout, out, rows, T, H);
        }
        cuda_check_kernel("attention_dvec_vec_kernel");
        return;
    }
    attention_dvec_kernel<<<unsigned((rows * 32 + 255) / 256), 256, 0, stream>>>(dvec, dout, out, B, T, H, D);
    cuda_check_kernel("attention_dvec_kernel");
}

void check_shape(const char* op, const AttentionShape& s) {
    check_nonneg(op, s.batch);
    check_nonneg(op, s.seq_len);
    if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0)
        throw_op_error(op, "n_heads, n_kv_heads and head_dim must be positive");
    if (s.n_heads % s.n_kv_heads != 0) throw_op_error(op, "n_heads is not a multiple of n_kv_heads");
    if (s.kv_len != 0 && s.kv_len < s.seq_len) throw_op_error(op, "kv_len is below seq_len");
    if (!attention_supports_head_dim(s.head_dim))
        throw_op_error(op, "the CUDA attention kernels take head_dim 16, 32, 64 or 128 only");
}

}  // namespace

bool attention_supports_head_dim(int64_t head_dim) { return skew::attention_head_dim_supported(head_dim); }

bool attention_uses_tensor_cores(const void* q, const void* k, const void* v, const void* out,
                                 const AttentionShape& s) {
    return attention_mma_supports(s) && aligned16(q, k, v, out);
}

void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                       cudaStream_t stream) {
    check_shape("attention_forward", s);
    if (s.batch == 0 || s.seq_len == 0) return;
    if (attention_uses_tensor_cores(q, k, v, out, s)) attention_forward_mma(out, lse, q, k, v, s, stream);
    else attention_forward_simt(out, lse, q, k, v, s, stream);
}

int64_t attention_backward_scratch_bytes(const AttentionShape& s) {
    return cuda_ws::attention_backward_scratch_bytes(s.batch, s.n_heads, s.seq_len);
}

void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const AttentionShape& s, void* scratch,
                        cudaStream_t stream) {
    check_shape("attention_backward", s);
    if (s.keys() != s.seq_len)
        throw_op_error("attention_backward", "kv_len differs from seq_len (a KV-cache step has no backward)");
    const int64_t B = s.batch, T = s.seq_len, H = s.n_heads, D = s.head_dim;
    if (B == 0 || T == 0) return;
    float* dvec = static_cast<float*>(scratch);
    attention_dvec(dvec, dout, out, B, T, H, D, stream);
    if (attention_uses_tensor_cores(q, k, v, dout, s) && aligned16(dq, dk, dv))
        attention_backward_mma(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream);
    else attention_backward_simt(dq, dk, dv, dout, q, k, v, lse, dvec, s, stream);
}

}  // namespace skew::cuda
