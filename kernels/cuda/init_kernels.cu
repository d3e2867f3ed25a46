// Device parameter initialization (kernels/cuda/init_kernels.h): each thread draws eight elements
// from four Philox blocks (philox_normal uses words 0,1 of block i/2 for even i and 2,3 for odd i)
// and stores them with one 16-byte store (bf16) or two (fp32); a scalar loop covers a tail or an
// unaligned buffer.
#include <cuda_runtime.h>

#include "kernels/common/init_math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/init_kernels.h"

namespace skew::cuda {

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ void put8(bf16* p, const float (&v)[8]) {
    uint4 u;
    u.x = uint32_t(f32_to_bf16(v[0]).bits) | (uint32_t(f32_to_bf16(v[1]).bits) << 16);
    u.y = uint32_t(f32_to_bf16(v[2]).bits) | (uint32_t(f32_to_bf16(v[3]).bits) << 16);
    u.z = uint32_t(f32_to_bf16(v[4]).bits) | (uint32_t(f32_to_bf16(v[5]).bits) << 16);
    u.w = uint32_t(f32_to_bf16(v[6]).bits) | (uint32_t(f32_to_bf16(v[7]).bits) << 16);
    *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void put8(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void put1(bf16* p, float v) { *p = f32_to_bf16(v); }
__device__ __forceinline__ void put1(float* p, float v) { *p = v; }

/// The two normals of Philox block `pair` (elements 2 pair, 2 pair + 1), as philox_normal draws them.
__device__ __forceinline__ void normal_pair(const PhiloxKey& key, uint32_t tensor, uint64_t pair, float std, float& a,
                                            float& b) {
    const Philox4 r = philox_block(key, 0, tensor, pair);
    a = std * (sqrtf(-2.0f * logf(u32_to_uniform_open0(r.v[0]))) * cosf(6.2831853071795864f * u32_to_uniform(r.v[1])));
    b = std * (sqrtf(-2.0f * logf(u32_to_uniform_open0(r.v[2]))) * cosf(6.2831853071795864f * u32_to_uniform(r.v[3])));
}

template <class T>
__global__ void init_normal_kernel(T* __restrict__ x, int64_t n, bool vec, uint64_t seed, uint32_t tensor, float std) {
    const PhiloxKey key{seed, PHILOX_STREAM_INIT};
    const int64_t n_vec = vec ? n / 8 : 0;
    for (int64_t j = thread_index(); j < n_vec; j += grid_stride()) {
        float v[8];
        const uint64_t pair = uint64_t(j) * 4;
        normal_pair(key, tensor, pair, std, v[0], v[1]);
        normal_pair(key, tensor, pair + 1, std, v[2], v[3]);
        normal_pair(key, tensor, pair + 2, std, v[4], v[5]);
        normal_pair(key, tensor, pair + 3, std, v[6], v[7]);
        put8(x + j * 8, v);
    }
    for (int64_t i = n_vec * 8 + thread_index(); i < n; i += grid_stride())
        put1(x + i, init_normal_value(seed, tensor, uint64_t(i), std));
}

}  // namespace

void init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std, cudaStream_t stream) {
    if (n <= 0) return;
    const unsigned grid = grid_for((n + 7) / 8, THREADS);
    if (x.type == ScalarType::BF16) {
        auto* p = static_cast<bf16*>(x.data);
        init_normal_kernel<<<grid, THREADS, 0, stream>>>(p, n, aligned16(p), seed, tensor, std);
    } else {
        auto* p = static_cast<float*>(x.data);
        init_normal_kernel<<<grid, THREADS, 0, stream>>>(p, n, aligned16(p), seed, tensor, std);
    }
    cuda_check_kernel("init_normal_kernel");
}

}  // namespace skew::cuda
