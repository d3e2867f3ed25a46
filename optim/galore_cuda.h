// GaLore's CUDA step (both forms) for one projected parameter: projection products on cuBLAS (fp32),
// the subspace Adam and the write-back on the device, the projector (SVD) on the host from a copy of
// the gradient (optim/galore.cpp galore_projector, so CPU and GPU projectors are bit-identical).
// In skew_optim_cuda: built only with the CUDA backend.
#pragma once
#include <cstdint>

#include "optim/optimizer_cuda.h"

namespace skew {

/// One GaLore step of a projected parameter on the device (same semantics as the CPU's
/// galore_step, docs/optimizers.md "GaLore"): per chunk of matrices, G (bf16 widened to fp32),
/// projector refresh where due (host SVD; synchronizes ctx.stream), G~ = projection of G, Adam on G~,
/// back-projection, W <- round(W*keep - alpha*N). Throws skew::Error on too little scratch, a
/// failed LAPACK SVD or a failed CUDA/cuBLAS call.
void galore_step_cuda(const OptimizerConfig& opt, const ParamSlot& s, const OptimStep& step,
                      const CudaOptimContext& ctx);

/// Host milliseconds spent computing GaLore projectors by this process (SVDs and their copies).
double galore_cuda_projector_host_ms();

}  // namespace skew
