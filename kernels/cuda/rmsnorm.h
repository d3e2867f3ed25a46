// CUDA RMSNorm with an fp32 weight (Llama-family models; docs/architectures.md): forward saving
// rstd, backward with a deterministic weight gradient. CPU twin: kernels/cpu/rmsnorm.cpp;
// semantics: Backend::rmsnorm_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// out (n_rows, C) bf16 = x * rstd * weight; rstd (n_rows) fp32 (nullable).
void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows, int64_t channels,
                     float eps, cudaStream_t stream);

/// dinp (n_rows, C) bf16 overwritten (or += when accumulate_dinp; null skips); dweight (C) fp32
/// accumulated (null skips), reduced over rows in fixed chunks and a fixed order. scratch:
/// cuda_ws::rmsnorm_backward_scratch_bytes bytes of device memory.
void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                      const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp, void* scratch,
                      cudaStream_t stream);

}  // namespace skew::cuda
