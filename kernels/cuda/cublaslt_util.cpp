// cuBLASLt descriptors and the heuristic query (kernels/cuda/cublaslt_util.h).
#include "kernels/cuda/cublaslt_util.h"

#include "kernels/cuda/cuda_check.h"

namespace skew::cuda {

LtMatmulDesc lt_matmul_desc(bool trans_a, bool trans_b) {
    cublasLtMatmulDesc_t raw = nullptr;
    cublas_check(cublasLtMatmulDescCreate(&raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LtMatmulDesc d(raw);
    const cublasOperation_t oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(d.get(), CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
    cublas_check(cublasLtMatmulDescSetAttribute(d.get(), CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
    return d;
}

LtMatrixLayout lt_matrix_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
    cublasLtMatrixLayout_t raw = nullptr;
    cublas_check(cublasLtMatrixLayoutCreate(&raw, type, uint64_t(rows), uint64_t(cols), ld));
    return LtMatrixLayout(raw);
}

bool lt_choose_algo(cublasLtHandle_t handle, LtPlan& plan, uint64_t workspace_bytes, const LtAlignment& al,
                    cublasStatus_t& status) {
    cublasLtMatmulPreference_t raw = nullptr;
    cublas_check(cublasLtMatmulPreferenceCreate(&raw));
    const LtPreference pref(raw);
    cublas_check(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes, sizeof(workspace_bytes)));
    const cublasLtMatmulPreferenceAttributes_t attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t bytes[4] = {al.a, al.b, al.c, al.d};
    for (int i = 0; i < 4; ++i)
        cublas_check(cublasLtMatmulPreferenceSetAttribute(pref.get(), attr[i], &bytes[i], sizeof(bytes[i])));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    status = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc.get(), plan.a.get(), plan.b.get(), plan.c.get(),
                                            plan.c.get(), pref.get(), 1, &result, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) return false;
    plan.algo = result.algo;
    return true;
}

}  // namespace skew::cuda
