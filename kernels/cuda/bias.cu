// CUDA bias add and bias gradient (docs/architectures.md "Attention biases"). The forward: a block
// of 256 columns by 16 rows per step; the gradient: partial column sums over fixed row chunks (as
// RMSNorm's weight gradient), then over the chunks in order, so it does not depend on timing.
// CPU twin: kernels/cpu/bias.cpp.
#include "kernels/cuda/bias.h"
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kCols = 256;  // columns per block of the forward
constexpr int kRows = 16;   // rows per block step of the forward

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

// dbias's partial sums over row chunks (kernels/cuda/column_partials.cuh): dout per row.
__global__ void bias_partials_kernel(ColumnSums<1> s, const bf16* __restrict__ dout, int64_t n_rows, int64_t C) {
    column_chunk_partials<1>(s, n_rows, C,
                             [&](int64_t r, int64_t col, float(&acc)[1]) { acc[0] += ld(dout[r * C + col]); });
}

}  // namespace

// ---- launchers

void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels, cudaStream_t stream) {
    check_nonneg("bias_add_forward n_rows", n_rows);
    check_nonneg("bias_add_forward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const int64_t row_blocks = (n_rows + kRows - 1) / kRows;
    const dim3 grid(unsigned((channels + kCols - 1) / kCols), grid_y_for(row_blocks));
    bias_add_forward_kernel<<<grid, kCols, 0, stream>>>(out, bias, n_rows, channels);
    cuda_check_kernel("bias_add_forward_kernel");
}

void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels, void* scratch,
                       cudaStream_t stream) {
    check_nonneg("bias_add_backward n_rows", n_rows);
    check_nonneg("bias_add_backward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const int64_t chunks = cuda_ws::layernorm_param_chunks(n_rows);
    const ColumnSums<1> sums{{dbias}, {static_cast<float*>(scratch)}};
    bias_partials_kernel<<<column_partials_grid(channels, chunks), COLUMN_PARTIAL_THREADS, 0, stream>>>(
        sums, dout, n_rows, channels);
    cuda_check_kernel("bias_partials_kernel");
    column_chunk_reduce(sums, chunks, channels, stream);
}

}  // namespace skew::cuda
