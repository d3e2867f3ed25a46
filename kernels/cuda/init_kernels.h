// Parameter initialization on the device: the Philox normals of kernels/common/init_math.h drawn by
// a kernel (one Philox block per two elements, 16-byte stores), so a model is ready in milliseconds
// instead of drawing billions of normals on the host.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace skew::cuda {

/// x[i] = round(std * philox_normal(seed, PHILOX_STREAM_INIT, 0, tensor, i)) for i < n; bf16 rounds
/// to nearest even, fp32 stores the value. x: device memory (bf16 or fp32). Asynchronous on
/// `stream`; throws skew::Error on a launch failure.
void init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std, cudaStream_t stream);

}  // namespace skew::cuda
