// Parameter initialization shared by the host draw (kernels/backend_init.cpp) and the CUDA kernel
// (kernels/cuda/init_kernels.cu): element i of parameter `tensor` is std * N(0, 1) from
// philox_normal(seed, PHILOX_STREAM_INIT, step 0, tensor, i) (docs/design.md, "Counter-based randomness").
// The two agree bit for bit in fp32 except where the device's logf / cosf differ from libm's by an
// ulp; after rounding to bf16 that shows in a few elements per million.
#pragma once
#include <cstdint>

#include "kernels/common/hd.h"
#include "kernels/common/philox.h"

namespace skew {

/// std * N(0, 1) for element `element` of parameter `tensor` (ParamInfo::index) under run seed `seed`.
SKEW_HD float init_normal_value(uint64_t seed, uint32_t tensor, uint64_t element, float std) {
    return std * philox_normal(PhiloxKey{seed, PHILOX_STREAM_INIT}, 0, tensor, element);
}

}  // namespace skew
