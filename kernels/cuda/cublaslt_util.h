// Owning cuBLASLt descriptors and the one heuristic query of the CUDA backend's cuBLASLt products
// (kernels/cuda/matmul.cpp: every dense product; kernels/cuda/muon.cu: Newton-Schulz). Pattern:
// llm.c llmc/matmul.cuh (fp32 compute, top-1 heuristic under a workspace limit and the operands'
// alignment). Host code, usable from .cu files; a failed descriptor call throws skew::Error.
#pragma once
#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <type_traits>

namespace skew::cuda {

struct LtMatmulDescDelete {
    void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
};
struct LtMatrixLayoutDelete {
    void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct LtPreferenceDelete {
    void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};

/// Owning handles: the descriptor is destroyed with its owner (move-only).
using LtMatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, LtMatmulDescDelete>;
using LtMatrixLayout = std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LtMatrixLayoutDelete>;
using LtPreference = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, LtPreferenceDelete>;

/// A matmul descriptor with fp32 compute and fp32 alpha/beta, cuBLASLt's A transposed when
/// trans_a and its B when trans_b (column-major operands).
LtMatmulDesc lt_matmul_desc(bool trans_a, bool trans_b);

/// A column-major rows x cols layout of `type` with leading dimension ld (elements).
LtMatrixLayout lt_matrix_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld);

/// One product's descriptors (cuBLASLt's A, B, and C = D sharing layout c) and the chosen algorithm.
struct LtPlan {
    LtMatmulDesc desc;
    LtMatrixLayout a, b, c;
    cublasLtMatmulAlgo_t algo{};
};

/// The alignment in bytes the heuristic may assume of every A, B, C and D pointer it will be run with
/// (cuBLASLt's default assumes 256).
struct LtAlignment {
    uint32_t a = 256, b = 256, c = 256, d = 256;
};

/// cuBLASLt's top algorithm for plan's descriptors under a workspace of workspace_bytes and the
/// alignments `al`, stored in plan.algo. Returns false when the heuristic fails or finds none
/// (`status` then holds its status; CUBLAS_STATUS_SUCCESS with no algorithm found); the caller
/// reports the shape. Throws skew::Error when a preference call fails.
bool lt_choose_algo(cublasLtHandle_t handle, LtPlan& plan, uint64_t workspace_bytes, const LtAlignment& al,
                    cublasStatus_t& status);

}  // namespace skew::cuda
