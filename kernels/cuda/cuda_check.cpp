// The throwing half of cuda_check.h, compiled by the host compiler so it may use fmt: every CUDA
// failure becomes one skew::Error that names where it happened and what to do next.
#include "kernels/cuda/cuda_check.h"

#include <cublas_api.h>

#include "engine/error.h"

namespace skew::cuda {

void throw_cuda_error(const char* file, int line, const char* what, cudaError_t err) {
    const char* hint = "";
    if (err == cudaErrorMemoryAllocation)
        hint =
            "\n--> HINT: the device is out of memory; free it (other processes: nvidia-smi), or see what fits with "
            "`skew plan CONFIG --budget GIB`";
    else if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
        hint = "\n--> HINT: no usable CUDA device; run on the CPU backend or check the driver (nvidia-smi)";
    else if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure)
        hint =
            "\n--> HINT: a kernel faulted (errors are asynchronous: it may be an earlier kernel); rerun with "
            "CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer";
    fail("{}:{}: {} failed: {}: {}{}", file, line, what, cudaGetErrorName(err), cudaGetErrorString(err), hint);
}

void throw_cublas_error(const char* file, int line, const char* what, int status) {
    fail("{}:{}: {} failed: {} (status {})", file, line, what,
         cublasGetStatusString(static_cast<cublasStatus_t>(status)), status);
}

void throw_op_error(const char* op, const char* msg) { fail("{}: {}", op, msg); }

void check_nonneg(const char* what, long long v) {
    if (v < 0) fail("{}: negative size {}", what, v);
}

}  // namespace skew::cuda
