// CUDA sigmoid gate and its backward: the shared experts' output scaled per token by
// sigmoid(x · w_gate) (Qwen2-MoE; docs/architectures.md, "Shared experts"). Semantics:
// Backend::sigmoid_gate_* in kernels/backend.h; CPU twin kernels/cpu/sigmoid_gate.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// out (n_rows, C) bf16 = [out +] sigmoid(logit[r]) * s (n_rows, C) bf16; logit (n_rows) fp32.
void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                          bool accumulate, cudaStream_t stream);

/// ds = g * dout (bf16, may be null); dlogit[r] = g (1 - g) Σ_c dout s (fp32, may be null), one warp per row.
void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s, int64_t n_rows,
                           int64_t channels, cudaStream_t stream);

}  // namespace skew::cuda
