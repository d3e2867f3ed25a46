// Internal to kernels/cuda: the two implementations behind attention.h. attention_mma.cu runs on
// tensor cores (mma.sync, FlashAttention-2's schedule) and is the one used; attention_simt.cu runs
// on CUDA cores and is the fallback for inputs the tensor-core kernels cannot read (pointers not
// 16-byte aligned) or shapes past their grid limits. Shapes and layouts: AttentionShape in
// kernels/backend.h; dvec is the backward's per-row D = <dout, out>, (B, H, T) fp32.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/backend.h"

namespace skew::cuda {

/// True when the tensor-core kernels take this shape (head_dim 16, 32, 64 or 128; seq_len up to
/// 65535 tiles of 64; batch·n_heads below 2^31).
bool attention_mma_supports(const AttentionShape& s);

/// Keys per tile of the forward and dQ kernels (attention_mma.cuh): 64 (the default, used by
/// attention.h) or 32 (a third block per SM at head_dim 128; bench_gpu_ops times both).
constexpr int kAttentionKeyTile = 64;

void attention_forward_mma(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                           cudaStream_t stream, int key_tile = kAttentionKeyTile);
void attention_backward_mma(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const float* lse, const float* dvec, const AttentionShape& s, cudaStream_t stream,
                            int key_tile = kAttentionKeyTile);

void attention_forward_simt(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                            cudaStream_t stream);
void attention_backward_simt(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                             const bf16* v, const float* lse, const float* dvec, const AttentionShape& s,
                             cudaStream_t stream);

}  // namespace skew::cuda
