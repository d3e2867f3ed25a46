// CUDA matrix products through cuBLASLt (llm.c's matmul_cublaslt): bf16 operands with fp32
// accumulation, or fp32 throughout (the router); row-major MatmulShape mapped onto column-major
// cuBLASLt; the heuristic's algorithm cached per shape, dtype and alignment. CPU twin:
// kernels/cpu/matmul.cpp; semantics: Backend::matmul in kernels/backend.h.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace skew::cuda {

/// A cuBLASLt handle, its workspace and the per-shape algorithm cache. One per backend (not
/// thread-safe). Mixed operand dtypes cuBLASLt does not take (bf16 with fp32, or fp32 operands
/// into a bf16 C) are widened to fp32 in a conversion buffer this object owns and grows.
class Matmul {
public:
    Matmul();
    ~Matmul();
    Matmul(const Matmul&) = delete;
    Matmul& operator=(const Matmul&) = delete;

    /// Use caller-owned device memory as the cuBLASLt workspace (e.g. an arena buffer); bytes >= 0.
    /// Until called, the object allocates its own 32 MiB. Algorithms are chosen for this size.
    void set_workspace(void* workspace, int64_t bytes);
    /// Use caller-owned device memory (`elems` fp32) to widen bf16 operands of mixed-dtype products
    /// (a product needing more falls back to its own buffer); nullptr returns to the own buffer.
    void set_widen_buffer(float* buffer, int64_t elems);

    /// C = alpha·op(A)·op(B) + beta·C, row-major (MatmulShape), on `stream`. Same semantics,
    /// dtypes and errors as Backend::matmul; k = 0 gives C = beta·C. Throws skew::Error naming the
    /// shape when cuBLASLt has no algorithm.
    void run(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s, cudaStream_t stream);

    /// The cuBLASLt workspace in use (caller-owned or own) and its size; the grouped expert GEMM
    /// gives the same memory to cuBLAS.
    void* workspace() const;
    int64_t workspace_bytes() const;

    /// Number of distinct shapes whose algorithm is cached (for tests and benchmarks).
    int64_t cached_shapes() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace skew::cuda
