// Error checks for CUDA runtime and cuBLAS(Lt) calls (llm.c's cudaCheck / cublasCheck): a failed
// call throws skew::Error naming the file, line, call or kernel and the runtime's message, with a
// hint where one helps. Usable from .cu files (no fmt here; the throwing helpers live in cuda_check.cpp).
#pragma once
#include <cuda_runtime_api.h>

namespace skew::cuda {

/// Throw skew::Error for a failed CUDA runtime call: "<file>:<line>: <what> failed: <name>: <msg>"
/// plus a hint for out-of-memory and no-device errors. what names the call or kernel.
[[noreturn]] void throw_cuda_error(const char* file, int line, const char* what, cudaError_t err);

/// Throw skew::Error for a failed cuBLAS / cuBLASLt call (status is the cublasStatus_t value).
[[noreturn]] void throw_cublas_error(const char* file, int line, const char* what, int status);

/// Throw skew::Error for an invalid argument of a CUDA op ("<op>: <msg>"), the CUDA twin of the
/// CPU backend's fail(); the message is preformatted by the caller.
[[noreturn]] void throw_op_error(const char* op, const char* msg);

/// Throw skew::Error when v < 0: "<what>: negative size <v>" (the CPU twin's check_nonneg).
void check_nonneg(const char* what, long long v);

}  // namespace skew::cuda

/// Check a CUDA runtime call; throws skew::Error with file, line and the call's text.
#define cuda_check(expr)                                                                                  \
    do {                                                                                                  \
        cudaError_t skew_err_ = (expr);                                                                   \
        if (skew_err_ != cudaSuccess) skew::cuda::throw_cuda_error(__FILE__, __LINE__, #expr, skew_err_); \
    } while (0)

/// Check that the kernel just launched started (launch configuration, no device); names the kernel.
#define cuda_check_kernel(kernel_name)                                                                          \
    do {                                                                                                        \
        cudaError_t skew_err_ = cudaGetLastError();                                                             \
        if (skew_err_ != cudaSuccess) skew::cuda::throw_cuda_error(__FILE__, __LINE__, kernel_name, skew_err_); \
    } while (0)

/// Check a cuBLAS / cuBLASLt call (any cublasStatus_t; 0 is success).
#define cublas_check(expr)                                                                      \
    do {                                                                                        \
        int skew_st_ = int(expr);                                                               \
        if (skew_st_ != 0) skew::cuda::throw_cublas_error(__FILE__, __LINE__, #expr, skew_st_); \
    } while (0)

namespace skew::cuda {

/// Bits of the backend's device error word: kernels that validate indices set a bit instead of
/// trapping; CudaBackend::check_errors() reads the word at the next synchronization and throws.
enum CudaErrorBit : int {
    CUDA_ERR_TOKEN_RANGE = 1,   // embedding: a token outside [0, vocab_rows)
    CUDA_ERR_TARGET_RANGE = 2,  // cross-entropy: a target outside [0, vocab_size)
    CUDA_ERR_EXPERT_RANGE = 4,  // dispatch: an expert index outside [0, n_experts)
    CUDA_ERR_OFFSETS = 8,       // grouped matmul: offsets decrease or do not end at n_rows
};

}  // namespace skew::cuda
