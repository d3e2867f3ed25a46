// The cuBLASLt helpers both product paths use (kernels/cuda/cublaslt_util.h: kernels/cuda/matmul.cpp,
// kernels/cuda/muon.cu): the descriptor carries fp32 compute and the asked transposes, the layout
// its type, shape and leading dimension, and the heuristic picks an algorithm that runs.
#include <catch2/catch.hpp>
#include <cublasLt.h>

#include <vector>

#include "kernels/common/bf16.h"
#include "kernels/cuda/cublaslt_util.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using skew::test::Dev;

TEST_CASE("cuBLASLt helpers: descriptor, layout and the heuristic's algorithm for a bf16 product", "[gpu]") {
    SKEW_REQUIRE_GPU();
    cuda::LtPlan p;
    p.desc = cuda::lt_matmul_desc(true, false);
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_T;
    cublasComputeType_t compute = CUBLAS_COMPUTE_16F;
    cudaDataType_t scale = CUDA_R_16BF;
    size_t got = 0;
    cublas_check(cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta), &got));
    cublas_check(cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb), &got));
    cublas_check(cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute,
                                                sizeof(compute), &got));
    cublas_check(
        cublasLtMatmulDescGetAttribute(p.desc.get(), CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof(scale), &got));
    CHECK(ta == CUBLAS_OP_T);
    CHECK(tb == CUBLAS_OP_N);
    CHECK(compute == CUBLAS_COMPUTE_32F);
    CHECK(scale == CUDA_R_32F);

    // D (m x n) = A^T B with A stored k x m, B k x n, column-major; m = 32, n = 16, k = 64
    const int64_t m = 32, n = 16, k = 64;
    p.a = cuda::lt_matrix_layout(CUDA_R_16BF, k, m, k);
    p.b = cuda::lt_matrix_layout(CUDA_R_16BF, k, n, k);
    p.c = cuda::lt_matrix_layout(CUDA_R_32F, m, n, m);
    uint64_t rows = 0, cols = 0;
    int64_t ld = 0;
    cudaDataType_t type = CUDA_R_8I;
    cublas_check(cublasLtMatrixLayoutGetAttribute(p.a.get(), CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows), &got));
    cublas_check(cublasLtMatrixLayoutGetAttribute(p.a.get(), CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof(cols), &got));
    cublas_check(cublasLtMatrixLayoutGetAttribute(p.a.get(), CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld), &got));
    cublas_check(cublasLtMatrixLayoutGetAttribute(p.c.get(), CUBLASLT_MATRIX_LAYOUT_TYPE, &type, sizeof(type), &got));
    CHECK(rows == uint64_t(k));
    CHECK(cols == uint64_t(m));
    CHECK(ld == k);
    CHECK(type == CUDA_R_32F);

    cublasLtHandle_t handle = nullptr;
    cublas_check(cublasLtCreate(&handle));
    cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
    const bool found = cuda::lt_choose_algo(handle, p, 0, cuda::LtAlignment{16, 16, 16, 16}, st);
    CHECK(found);
    CHECK(st == CUBLAS_STATUS_SUCCESS);
    // the chosen algorithm computes the product: A = 1 everywhere, B column j = j / 8, so D(i, j) = 8 j
    std::vector<bf16> ha(size_t(k * m), f32_to_bf16(1.0f)), hb(size_t(k * n));
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < k; ++i) hb[size_t(j * k + i)] = f32_to_bf16(float(j) / 8.0f);
    Dev<bf16> a(ha), b(hb);
    Dev<float> d{std::vector<float>(size_t(m * n), -1.0f)};
    const float alpha = 1.0f, beta = 0.0f;
    if (found)
        cublas_check(cublasLtMatmul(handle, p.desc.get(), &alpha, a.p, p.a.get(), b.p, p.b.get(), &beta, d.p, p.c.get(),
                                    d.p, p.c.get(), &p.algo, nullptr, 0, nullptr));
    cuda_check(cudaDeviceSynchronize());
    const std::vector<float> hd = d.get();
    int wrong = 0;
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) wrong += hd[size_t(j * m + i)] != 8.0f * float(j);
    CHECK(wrong == 0);
    cublasLtDestroy(handle);
}
