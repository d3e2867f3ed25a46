// CUDA LayerNorm with bias and fp32 parameters (docs/design.md: pre-LayerNorm blocks, fp32 LayerNorm
// parameters): forward saving mean and rstd, backward with deterministic parameter gradients.
// CPU twin: kernels/cpu/layernorm.cpp; semantics: Backend::layernorm_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// out (n_rows, C) bf16 = (inp - mean) * rstd * weight + bias; mean, rstd (n_rows) fp32 (nullable).
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                       int64_t n_rows, int64_t channels, float eps, cudaStream_t stream);

/// Device scratch bytes layernorm_backward needs (per-chunk partial sums of dweight and dbias).
int64_t layernorm_backward_scratch_bytes(int64_t n_rows, int64_t channels);

/// dinp (n_rows, C) bf16 overwritten (or += when accumulate_dinp; null skips); dweight, dbias (C)
/// fp32 accumulated (null skips), reduced over rows in fixed chunks and a fixed order. scratch:
/// layernorm_backward_scratch_bytes bytes of device memory.
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t n_rows, int64_t channels,
                        bool accumulate_dinp, void* scratch, cudaStream_t stream);

}  // namespace skew::cuda
