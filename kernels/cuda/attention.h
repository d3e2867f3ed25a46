// CUDA causal grouped-query attention, flash-style (docs/design.md: 32 query heads share 8 KV heads,
// head dim 128; FlashAttention-2's schedule, Dao 2023): tiles of Q, K, V in shared memory,
// S = Q·K^T and P·V on tensor cores (mma.sync bf16, fp32 accumulation), online softmax, the
// log-sum-exp saved for the backward, scores recomputed there. head_dim 16 (tiny.yaml), 32
// (quickstart.yaml), 64 and 128 (the paper). CPU twin: kernels/cpu/attention.cpp; semantics and
// layouts: AttentionShape and Backend::attention_* in kernels/backend.h; design: docs/attention.md.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace skew::cuda {

/// True when the CUDA kernels take this head_dim (16, 32, 64 or 128).
bool attention_supports_head_dim(int64_t head_dim);

/// True when these device pointers and this shape run on the tensor-core kernels (every pointer
/// 16-byte aligned, as arena slots are; seq_len up to 4,194,240): otherwise the CUDA-core fallback
/// runs (pointers 4-byte aligned; the same results within rounding, at CUDA-core speed).
bool attention_uses_tensor_cores(const void* q, const void* k, const void* v, const void* out, const AttentionShape& s);

/// out (B, T, H, D) bf16 = softmax(q·k^T/sqrt(D) + causal mask)·v; lse (B, H, T) fp32 (nullable);
/// k, v (B, kv_len, KV, D), query row t at position kv_len - T + t (AttentionShape::kv_len).
/// Errors: n_heads not a multiple of n_kv_heads, head_dim not 16, 32, 64 or 128, kv_len below T.
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                       cudaStream_t stream);

/// Device scratch bytes of attention_backward (the per-row D = <dout, out>, (B, H, T) fp32).
int64_t attention_backward_scratch_bytes(const AttentionShape& s);

/// dq (B, T, H, D), dk, dv (B, T, KV, D) bf16, overwritten. Two kernels, no atomics: one per
/// (batch, KV head, key tile) sums dK and dV over the group's query heads and rows; one per
/// (batch, head, query tile) forms dQ. Deterministic. Row 0 of each sequence sees one key, so its
/// dS is exactly 0 (dq row 0 is 0; at seq_len 1, dq and dk are 0). Errors: as the forward's, and
/// kv_len other than 0 or T.
void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const AttentionShape& s, void* scratch, cudaStream_t stream);

}  // namespace skew::cuda
