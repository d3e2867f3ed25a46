// CUDA bias add and bias gradient (docs/architectures.md "Attention biases"). The forward: a block
// of 256 columns by 16 rows per step; the gradient: partial column sums over fixed row chunks (as
// RMSNorm's weight gradient), then over the chunks in order, so it does not depend on timing.
// CPU twin: kernels/cpu/bias.cpp.
#include <algorithm>

#include "kernels/cuda/bias.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kCols = 256;                                     // columns per block of the forward
constexpr int kRows = 16;                                      // rows per block step of the forward
constexpr int kRowChunk = cuda_ws::LAYERNORM_PARAM_ROW_CHUNK;  // rows per partial sum of dbias
constexpr int kParamCols = 32;                                 // columns per block of the partials
constexpr int kParamRowLanes = 8;                              // row lanes per block of the partials
constexpr unsigned kMaxGridY = 65535;

__global__ void bias_add_forward_kernel(bf16* __restrict__ out, const float* __restrict__ bias, int64_t n_rows,
                                        int64_t C) {
    const int64_t col = int64_t(blockIdx.x) * kCols + threadIdx.x;
    if (col >= C) return;
    const float b = bias[col];
    for (int64_t r0 = int64_t(blockIdx.y) * kRows; r0 < n_rows; r0 += int64_t(gridDim.y) * kRows) {
        const int64_t r1 = min(n_rows, r0 + kRows);
        for (int64_t r = r0; r < r1; ++r) st(out + r * C + col, ld(out[r * C + col]) + b);
    }
}

// Block (column block, row chunk): the partial column sums of kParamCols columns over kRowChunk rows,
// row lane tr summing rows r0 + tr, r0 + tr + 8, ... and the lanes added in order.
__global__ void bias_partials_kernel(float* __restrict__ partial, const bf16* __restrict__ dout, int64_t n_rows,
                                     int64_t C) {
    __shared__ float sw[kParamRowLanes][kParamCols];
    const int tc = threadIdx.x % kParamCols, tr = threadIdx.x / kParamCols;
    const int64_t col = int64_t(blockIdx.x) * kParamCols + tc;
    const int64_t r0 = int64_t(blockIdx.y) * kRowChunk;
    const int64_t r1 = min(n_rows, r0 + kRowChunk);
    float s = 0.0f;
    if (col < C)
        for (int64_t r = r0 + tr; r < r1; r += kParamRowLanes) s += ld(dout[r * C + col]);
    sw[tr][tc] = s;
    __syncthreads();
    if (tr == 0 && col < C) {
        for (int i = 1; i < kParamRowLanes; ++i) s += sw[i][tc];
        partial[int64_t(blockIdx.y) * C + col] = s;
    }
}

__global__ void bias_reduce_kernel(float* __restrict__ dbias, const float* __restrict__ partial, int64_t n_chunks,
                                   int64_t C) {
    const int64_t col = thread_index();
    if (col >= C) return;
    float s = 0.0f;
    for (int64_t i = 0; i < n_chunks; ++i) s += partial[i * C + col];
    dbias[col] += s;
}

}  // namespace

// ---- launchers

void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels, cudaStream_t stream) {
    check_nonneg("bias_add_forward n_rows", n_rows);
    check_nonneg("bias_add_forward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const int64_t row_blocks = (n_rows + kRows - 1) / kRows;
    const dim3 grid(unsigned((channels + kCols - 1) / kCols), unsigned(std::min(row_blocks, int64_t(kMaxGridY))));
    bias_add_forward_kernel<<<grid, kCols, 0, stream>>>(out, bias, n_rows, channels);
    cuda_check_kernel("bias_add_forward_kernel");
}

void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels, void* scratch,
                       cudaStream_t stream) {
    check_nonneg("bias_add_backward n_rows", n_rows);
    check_nonneg("bias_add_backward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const int64_t chunks = cuda_ws::layernorm_param_chunks(n_rows);
    if (chunks > int64_t(kMaxGridY)) throw_op_error("bias_add_backward", "more than 65535 x 256 rows");
    float* partial = static_cast<float*>(scratch);
    const dim3 grid(unsigned((channels + kParamCols - 1) / kParamCols), unsigned(chunks));
    bias_partials_kernel<<<grid, kParamCols * kParamRowLanes, 0, stream>>>(partial, dout, n_rows, channels);
    cuda_check_kernel("bias_partials_kernel");
    bias_reduce_kernel<<<grid_for(channels, 256), 256, 0, stream>>>(dbias, partial, chunks, channels);
    cuda_check_kernel("bias_reduce_kernel");
}

}  // namespace skew::cuda
