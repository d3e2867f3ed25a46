// CUDA SwiGLU activation h = silu(a) * b and its backward (docs/design.md: the dense block's and every
// expert's w3(silu(w1 x) * w2 x)). Formulas: kernels/common/activations.h, shared with the CPU twin
// kernels/cpu/swiglu.cpp; semantics: Backend::swiglu_* in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

/// h = silu(a) * b, all (n) bf16.
void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);

/// da = dh * b * silu'(a), db = dh * silu(a), all (n) bf16, overwritten.
void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);

}  // namespace skew::cuda
