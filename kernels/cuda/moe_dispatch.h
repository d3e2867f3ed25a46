// CUDA MoE dispatch (dropless): the stable counting sort of token copies by expert, the gather of
// token rows into expert order and its backward, and the weighted combine and its backward
// (docs/design.md, "The paper's model": top-2 over 128 experts). CPU twin: kernels/cpu/moe_dispatch.cpp;
// semantics: Backend::moe_dispatch / moe_gather_* / moe_combine_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// Device scratch bytes of moe_dispatch.
int64_t moe_dispatch_scratch_bytes(int64_t n_tokens, int64_t top_k, int64_t n_experts);

/// Stable sort of the n·k copies by expert: sorted_to_copy, copy_to_sorted (n·k) int64; offsets
/// (E+1) int64, all device memory. An index outside [0, E) sets CUDA_ERR_EXPERT_RANGE in *error_word.
void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                  int64_t n_tokens, int64_t top_k, int64_t n_experts, int* error_word, void* scratch,
                  cudaStream_t stream);

/// xs[p] = x[sorted_to_copy[p] / k]; xs (n·k, C), x (n, C) bf16.
void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                        int64_t channels, cudaStream_t stream);

/// dx[t] (+)= Σ_slot dxs[copy_to_sorted[t·k + slot]] in slot order; dx (n, C), dxs (n·k, C) bf16.
void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                         int64_t channels, bool accumulate, cudaStream_t stream);

/// out[t] = Σ_slot gates[t, slot]·ys[copy_to_sorted[t·k + slot]] (fp32, slot order); out (n, C),
/// ys (n·k, C) bf16; gates (n, k) fp32.
void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted, int64_t n_tokens,
                         int64_t top_k, int64_t channels, cudaStream_t stream);

/// dys[copy_to_sorted[t·k+s]] = gates[t,s]·dout[t]; dgates[t,s] = <dout[t], ys[copy_to_sorted[t·k+s]]>
/// (one warp per copy, fixed tree). Either output nullable.
void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                          const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k, int64_t channels,
                          cudaStream_t stream);

}  // namespace skew::cuda
