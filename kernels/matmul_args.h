// Argument checks of the general matrix product, shared by every backend: one host function, so the
// CPU (kernels/cpu/matmul.cpp) and CUDA (kernels/cuda/matmul.cpp) backends refuse the same calls
// with the same message. Backend-specific limits (BLAS 32-bit sizes, cuBLASLt dtypes) stay with them.
#pragma once
#include "kernels/backend.h"

namespace skew {

/// Validate C = alpha·op(A)·op(B) + beta·C (shapes as in MatmulShape) before a backend runs it:
/// m, n and k must be >= 0; a non-empty product (m > 0 and n > 0) needs a non-null C, and A and B
/// non-null when k > 0 (k = 0 is the empty reduction C = beta·C, which reads neither). An empty
/// product (m or n = 0) may pass null pointers: the caller returns without touching anything.
/// Host code only; reads no tensor data. Throws skew::Error: "matmul m: negative size -1",
/// "matmul: null output for a 4x5 product", "matmul: null operand for a 4x5x6 product".
void matmul_check_args(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s);

}  // namespace skew
