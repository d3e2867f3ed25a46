// Device helpers shared by every CUDA kernel of skew: bf16/fp32 loads and stores that round exactly
// as the CPU twins do (kernels/common/bf16.h), deterministic warp and block reductions, and grid
// sizing with 64-bit element counts. Included by .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/bf16.h"

namespace skew::cuda {

// ---- element access (fp32 math, one rounding on store, as the CPU backend's load/store)

__device__ __forceinline__ float ld(bf16 x) { return bf16_to_f32(x); }
__device__ __forceinline__ float ld(float x) { return x; }
__device__ __forceinline__ void st(bf16* p, float v) { *p = f32_to_bf16(v); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }

// ---- 16-byte vectors of 8 bf16 (one LDG.128 / STG.128 per thread on memory-bound kernels)

struct alignas(16) Bf16x8 {
    bf16 v[8];
};

__device__ __forceinline__ Bf16x8 load8(const bf16* p) {
    Bf16x8 r;
    *reinterpret_cast<uint4*>(&r) = *reinterpret_cast<const uint4*>(p);
    return r;
}

__device__ __forceinline__ void store8(bf16* p, const Bf16x8& r) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&r);
}

/// True when every pointer is 16-byte aligned (null pointers count as aligned).
template <class... P>
inline bool aligned16(const P*... p) {
    return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

// ---- reductions: fixed shuffle trees, so results do not depend on timing

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// smem: at least 32 elements of T. Deterministic. Contains __syncthreads: call from all threads.
template <class T>
__device__ T block_sum(T v, T* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // smem may still be read by a previous call
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    T r = lane < n_warps ? smem[lane] : T(0);
    return warp_sum(r);
}

/// Max over the block (same contract as block_sum).
__device__ inline float block_max(float v, float* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? smem[lane] : -INFINITY;
    return warp_max(r);
}

// ---- launch sizing

/// Blocks for a grid-stride loop over n elements with `threads` per block (at least 1, capped so
/// the grid stays a few waves deep; the kernels loop with 64-bit indices).
inline unsigned grid_for(int64_t n, int threads) {
    const int64_t b = (n + threads - 1) / threads;
    return unsigned(std::clamp<int64_t>(b, 1, int64_t(1) << 20));
}

/// The most blocks a launch may have along grid.y (and grid.z): a kernel with more rows of work than
/// that along y loops over them in steps of gridDim.y (grid_y_for sizes such a launch).
inline constexpr int64_t kMaxGridY = 65535;

/// grid.y for a loop over n items along y in steps of gridDim.y: n clamped to [1, kMaxGridY].
inline unsigned grid_y_for(int64_t n) { return unsigned(std::clamp<int64_t>(n, 1, kMaxGridY)); }

/// Global thread index and stride of a 1-D grid-stride loop, 64-bit.
__device__ __forceinline__ int64_t thread_index() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

}  // namespace skew::cuda
