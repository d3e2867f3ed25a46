// CUDA RMSNorm forward and backward (docs/architectures.md). One warp per row; the weight gradient
// is summed over rows in fixed chunks, then over chunks in order, so it does not depend on timing.
// CPU twin: kernels/cpu/rmsnorm.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kRowsPerBlock = 8;                                    // warps per block, one row each
constexpr int kParamRowChunk = cuda_ws::LAYERNORM_PARAM_ROW_CHUNK;  // rows per partial sum of dweight
constexpr int kParamCols = 32;                                      // columns per block of the partial-sum kernel
constexpr int kParamRowLanes = 8;                                   // row lanes per block of the partial-sum kernel

__global__ void rmsnorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ rstd, const bf16* __restrict__ inp,
                                       const float* __restrict__ weight, int64_t n_rows, int64_t C, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    const bf16* x = inp + row * C;
    float ss = 0.0f;
    for (int64_t c = lane; c < C; c += 32) ss += ld(x[c]) * ld(x[c]);
    const float rs = rsqrtf(warp_sum(ss) / float(C) + eps);
    bf16* o = out + row * C;
    for (int64_t c = lane; c < C; c += 32) st(o + c, ld(x[c]) * rs * weight[c]);
    if (lane == 0 && rstd) rstd[row] = rs;
}

__global__ void rmsnorm_backward_dinp_kernel(bf16* __restrict__ dinp, const bf16* __restrict__ dout,
                                             const bf16* __restrict__ inp, const float* __restrict__ weight,
                                             const float* __restrict__ rstd, int64_t n_rows, int64_t C,
                                             bool accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    const bf16* x = inp + row * C;
    const bf16* g = dout + row * C;
    const float rs = rstd[row];
    float s = 0.0f;  // sum of dnorm * norm
    for (int64_t c = lane; c < C; c += 32) s += ld(g[c]) * weight[c] * ld(x[c]) * rs;
    const float dot = warp_sum(s) / float(C);
    bf16* dx = dinp + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        float v = (ld(g[c]) * weight[c] - ld(x[c]) * rs * dot) * rs;
        if (accumulate) v += ld(dx[c]);
        st(dx + c, v);
    }
}

// Block (column block, row chunk): partial dweight of kParamCols columns over kParamRowChunk rows.
__global__ void rmsnorm_weight_partials_kernel(float* __restrict__ partial, const bf16* __restrict__ dout,
                                               const bf16* __restrict__ inp, const float* __restrict__ rstd,
                                               int64_t n_rows, int64_t C) {
    __shared__ float sw[kParamRowLanes][kParamCols];
    const int tc = threadIdx.x % kParamCols, tr = threadIdx.x / kParamCols;
    const int64_t col = int64_t(blockIdx.x) * kParamCols + tc;
    const int64_t r0 = int64_t(blockIdx.y) * kParamRowChunk;
    const int64_t r1 = min(n_rows, r0 + kParamRowChunk);
    float dw = 0.0f;
    if (col < C)
        for (int64_t r = r0 + tr; r < r1; r += kParamRowLanes)
            dw += ld(dout[r * C + col]) * ld(inp[r * C + col]) * rstd[r];
    sw[tr][tc] = dw;
    __syncthreads();
    if (tr == 0 && col < C) {
        for (int i = 1; i < kParamRowLanes; ++i) dw += sw[i][tc];
        partial[int64_t(blockIdx.y) * C + col] = dw;
    }
}

__global__ void rmsnorm_weight_reduce_kernel(float* __restrict__ dweight, const float* __restrict__ partial,
                                             int64_t n_chunks, int64_t C) {
    const int64_t col = thread_index();
    if (col >= C) return;
    float dw = 0.0f;
    for (int64_t i = 0; i < n_chunks; ++i) dw += partial[i * C + col];
    dweight[col] += dw;
}

}  // namespace

// ---- launchers

void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows, int64_t channels,
                     float eps, cudaStream_t stream) {
    check_nonneg("rmsnorm_forward n_rows", n_rows);
    check_nonneg("rmsnorm_forward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const unsigned blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    rmsnorm_forward_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, rstd, inp, weight, n_rows, channels, eps);
    cuda_check_kernel("rmsnorm_forward_kernel");
}

void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                      const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp, void* scratch,
                      cudaStream_t stream) {
    check_nonneg("rmsnorm_backward n_rows", n_rows);
    check_nonneg("rmsnorm_backward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    if (dinp) {
        const unsigned blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
        rmsnorm_backward_dinp_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, n_rows,
                                                                                channels, accumulate_dinp);
        cuda_check_kernel("rmsnorm_backward_dinp_kernel");
    }
    if (dweight) {
        const int64_t chunks = cuda_ws::layernorm_param_chunks(n_rows);
        float* partial = static_cast<float*>(scratch);
        const dim3 grid(unsigned((channels + kParamCols - 1) / kParamCols), unsigned(chunks));
        rmsnorm_weight_partials_kernel<<<grid, kParamCols * kParamRowLanes, 0, stream>>>(partial, dout, inp, rstd,
                                                                                         n_rows, channels);
        cuda_check_kernel("rmsnorm_weight_partials_kernel");
        rmsnorm_weight_reduce_kernel<<<grid_for(channels, 256), 256, 0, stream>>>(dweight, partial, chunks, channels);
        cuda_check_kernel("rmsnorm_weight_reduce_kernel");
    }
}

}  // namespace skew::cuda
