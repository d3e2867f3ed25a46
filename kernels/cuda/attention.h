// CUDA causal grouped-query attention, flash-style (docs/design.md: 32 query heads share 8 KV heads,
// head dim 128): tiles of Q, K, V in shared memory, online softmax, the log-sum-exp saved for the
// backward, scores recomputed there. head_dim 16, 32 (tiny.yaml), 64 and 128 (the paper). CPU twin: kernels/cpu/attention.cpp;
// semantics and layouts: AttentionShape and Backend::attention_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace skew::cuda {

/// True when the CUDA kernels take this head_dim (16, 32, 64 or 128).
bool attention_supports_head_dim(int64_t head_dim);

/// out (B, T, H, D) bf16 = softmax(q·k^T/sqrt(D) + causal mask)·v; lse (B, H, T) fp32 (nullable).
/// Errors: n_heads not a multiple of n_kv_heads, head_dim not 16, 32, 64 or 128.
void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                       cudaStream_t stream);

/// Device scratch bytes of attention_backward (the per-row D = <dout, out>, (B, H, T) fp32).
int64_t attention_backward_scratch_bytes(const AttentionShape& s);

/// dq (B, T, H, D), dk, dv (B, T, KV, D) bf16, overwritten. Two kernels, no atomics: one per
/// (batch, KV head, key tile) sums dK and dV over the group's query heads and rows; one per
/// (batch, head, query tile) forms dQ. Deterministic.
void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, const AttentionShape& s, void* scratch,
                        cudaStream_t stream);

}  // namespace skew::cuda
