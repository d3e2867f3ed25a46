// The CUDA kernels' write-back arguments from the CPU's (optim/optimizer_cuda.cpp, optim/galore_cuda.cpp):
// one conversion, so the GPU write keys its noise as the CPU's store_update does.
// In skew_optim_cuda: built only with the CUDA backend.
#pragma once
#include <cstdint>

#include "kernels/cuda/optim_kernels.h"
#include "optim/optim_internal.h"

namespace skew {

/// The cuda::OptimWrite of a CPU WriteBack: the same rounding mode, premultiply flag, decay factor,
/// update multiplier and noise key (seed, step, tensor, 64-bit element base; a one-matrix slot of a
/// bank, e.g. deferred expert gradients, starts past element 0). docs/optimizers.md §9.
inline cuda::OptimWrite device_write(const optim_detail::WriteBack& wb) {
    cuda::OptimWrite w;
    w.rounding = uint8_t(wb.mode);
    w.premultiply = wb.premultiply;
    w.keep = wb.keep;
    w.lr = wb.lr;
    w.seed = wb.seed;
    w.step = wb.step;
    w.tensor = wb.tensor;
    w.element_base = uint64_t(wb.element_base);
    return w;
}

}  // namespace skew
