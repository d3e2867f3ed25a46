// CUDA elementwise ops and the global grad-norm reduction: residual add, gradient accumulation,
// scaling, zero, dtype conversion, sum of squares over many buffers (docs/design.md, "Training
// protocol": clip at 1.0). CPU twin: kernels/cpu/elementwise.cpp; semantics: kernels/backend.h.
// Every launcher takes the CPU twin's arguments plus the stream; pointers are device memory.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "kernels/backend.h"

namespace skew::cuda {

/// out = a + b (n) bf16, fp32 sum rounded once; out may alias a or b.
void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);

/// dst += src (n), each bf16 or fp32; fp32 sum, one rounding.
void accumulate(TensorRef dst, ConstTensorRef src, int64_t n, cudaStream_t stream);

/// x *= factor (n), bf16 or fp32, in place.
void scale(TensorRef x, float factor, int64_t n, cudaStream_t stream);

/// x = 0 (n), bf16 or fp32 (cudaMemsetAsync).
void zero(TensorRef x, int64_t n, cudaStream_t stream);

/// dst = src converted (n); bf16 destinations round to nearest even.
void convert(TensorRef dst, ConstTensorRef src, int64_t n, cudaStream_t stream);

/// Device scratch bytes sum_squares needs for these buffers (descriptors + per-block partials).
int64_t sum_squares_scratch_bytes(std::span<const BufferRef> buffers);

/// Σ over all buffers of Σ x² in double, as ONE kernel over all buffers plus one final reduction
/// kernel (fixed partition and fixed tree: deterministic). Synchronizes the stream and returns the
/// host value. scratch: sum_squares_scratch_bytes bytes of device memory, 16-byte aligned.
double sum_squares(std::span<const BufferRef> buffers, void* scratch, cudaStream_t stream);

/// out[0] += alpha * Σ a[r ld + c] b[r ld + c] (r < rows, c < cols; fp32), one block: each thread
/// sums a fixed stride of the rows cols elements in double, then a fixed tree; deterministic for a
/// given shape, no scratch, no library call. out: one fp32 value, 4-byte aligned. Throws on
/// rows < 0, cols < 0 or ld < cols.
void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld, float alpha,
                    cudaStream_t stream);

}  // namespace skew::cuda
