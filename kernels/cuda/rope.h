// CUDA rotary position embedding (kernels/common/rope_math.h). CPU twin: kernels/cpu/rope.cpp;
// semantics: Backend::rope in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// Rotates x (batch, seq_len, n_heads, head_dim) bf16 in place (inverse: back); positions pos0 + t.
void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
          bool inverse, cudaStream_t stream);

}  // namespace skew::cuda
