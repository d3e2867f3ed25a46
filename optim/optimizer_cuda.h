// The optimizer step on the CUDA backend: the same tier policy and state layout as the CPU step
// (optim/optimizer.h), dispatched per parameter to the kernels of kernels/cuda/optim_kernels.h.
// In skew_optim_cuda: built only with the CUDA backend.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "optim/optimizer.h"

namespace skew {

/// Device resources of one optimizer step: scratch of optimizer_cuda_scratch_bytes bytes
/// (256-byte aligned device memory, e.g. an arena workspace buffer), a cuBLAS handle (GaLore) and the stream.
struct CudaOptimContext {
    void* scratch = nullptr;
    int64_t scratch_bytes = 0;
    cublasHandle_t cublas = nullptr;
    cudaStream_t stream = nullptr;
    /// SkewAdam/Adafactor on an expert stack: run the update-RMS and write passes one matrix at a
    /// time, so each matrix's gradient (32 MiB at 4096 x 4096) is read from HBM once for both
    /// (the second read hits the L2), at the cost of three launches per matrix. Same results;
    /// bench_gpu_ops measures both ways.
    bool matrix_by_matrix = false;
};

/// Device scratch bytes the step needs for these parameters (the largest single tensor's need;
/// tensors are stepped one after another on the stream).
int64_t optimizer_cuda_scratch_bytes(const OptimizerConfig& opt, std::span<const ParamSlot> params);

/// optimizer_step on the GPU: every pointer of every slot (weight, grad, state) is device memory.
/// Same semantics as the CPU step up to fp32 reduction order (tests compare them). Asynchronous on
/// ctx.stream, except that a GaLore projector refresh synchronizes it (host SVD, optim/galore_cuda.h).
/// Throws skew::Error for views, too little scratch, or a failed launch.
void optimizer_step_cuda(const OptimizerConfig& opt, std::span<ParamSlot> params, const OptimStep& step,
                         const CudaOptimContext& ctx);

}  // namespace skew
