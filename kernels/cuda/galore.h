// GaLore's elementwise GPU kernels (docs/optimizers.md "GaLore"): the Adam of the projected gradient,
// the per-matrix "projector still zero" flags, and the write-back of a dense fp32 update. The
// projection products run on cuBLAS (optim/galore_cuda.cpp). CPU twin: optim/galore.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/optim_kernels.h"

namespace skew::cuda {

/// In place over n elements: x <- m / (sqrt(v) + eps) after m <- b1 m + omb1 x,
/// v <- b2 v + omb2 x^2 (galore_adam_element, bit-identical to the CPU given the same scalars:
/// omb = float(1 - beta) computed in double, as the CPU does). All fp32 device memory.
void galore_adam(float* x, float* m, float* v, int64_t n, float b1, float omb1, float b2, float omb2, float eps,
                 cudaStream_t stream);

/// flags[e] = 1 when matrix e of P (n_mat blocks of `per` fp32) holds a non-zero, else 0 (int32).
void galore_nonzero_flags(const float* P, int64_t n_mat, int64_t per, int32_t* flags, cudaStream_t stream);

/// W[el] <- round(W[el]*keep - lr*U[el - begin]) for el in [begin, begin + count) of t's weight
/// (bf16 through w's rounding with noise keyed by el, one Philox block per four elements; fp32
/// exact), as the CPU's for_each_write. U: count fp32.
void write_dense_update(const OptimTensor& t, const float* U, int64_t begin, int64_t count, const OptimWrite& w,
                        cudaStream_t stream);

}  // namespace skew::cuda
