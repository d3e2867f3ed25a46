// CUDA bias add of a linear layer's output rows and the bias gradient (model.attention_bias;
// docs/architectures.md "Attention biases"). CPU twin: kernels/cpu/bias.cpp; semantics:
// Backend::bias_add_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// out (n_rows, C) bf16 += bias (C) fp32 per row, in place (fp32 sum, one rounding).
void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels, cudaStream_t stream);

/// dbias (C) fp32 += the column sums of dout (n_rows, C) bf16: partial sums over fixed row chunks,
/// then over the chunks in order (deterministic). scratch: cuda_ws::bias_add_backward_scratch_bytes
/// bytes of device memory.
void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels, void* scratch,
                       cudaStream_t stream);

}  // namespace skew::cuda
