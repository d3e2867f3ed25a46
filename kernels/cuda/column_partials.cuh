// Column sums of per-row terms in an order fixed by the shape: the weight and bias gradients of
// RMSNorm, LayerNorm and the bias add (kernels/cuda/rmsnorm.cu, layernorm.cu, bias.cu). Partial sums
// over chunks of cuda_ws::LAYERNORM_PARAM_ROW_CHUNK rows, then the chunks added in order, so that the
// sums do not depend on timing; row chunks past grid.y's limit are reached by a loop over blockIdx.y.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

constexpr int COLUMN_PARTIAL_COLS = 32;      // columns per block of the partial sums
constexpr int COLUMN_PARTIAL_ROW_LANES = 8;  // row lanes per block of the partial sums
constexpr int COLUMN_PARTIAL_THREADS = COLUMN_PARTIAL_COLS * COLUMN_PARTIAL_ROW_LANES;

/// NS fp32 column sums of a (n_rows, C) input: out[k] (C) receives sum k (+=; null: not wanted),
/// partial[k] is its scratch of (chunks, C) fp32, chunks = cuda_ws::layernorm_param_chunks(n_rows).
template <int NS>
struct ColumnSums {
    float* out[NS];
    float* partial[NS];
};

/// The grid of a kernel calling column_chunk_partials: 32-column blocks along x, row chunks along y
/// (capped at kMaxGridY; the device function loops over the rest).
inline dim3 column_partials_grid(int64_t C, int64_t n_chunks) {
    return dim3(unsigned((C + COLUMN_PARTIAL_COLS - 1) / COLUMN_PARTIAL_COLS), grid_y_for(n_chunks));
}

/// In a kernel of COLUMN_PARTIAL_THREADS threads on column_partials_grid(C, chunks): this block's 32
/// columns' sums of add_row over each of its row chunks (blockIdx.y, blockIdx.y + gridDim.y, ...) into
/// s.partial[k][chunk * C + col]. Row lane tr sums rows r0 + tr, r0 + tr + 8, ...; the lanes are added
/// in order. add_row(r, col, acc) adds row r's NS terms of column col to acc[0..NS).
template <int NS, class AddRow>
__device__ void column_chunk_partials(const ColumnSums<NS>& s, int64_t n_rows, int64_t C, AddRow add_row) {
    __shared__ float lanes[NS][COLUMN_PARTIAL_ROW_LANES][COLUMN_PARTIAL_COLS];
    constexpr int64_t kChunkRows = cuda_ws::LAYERNORM_PARAM_ROW_CHUNK;
    const int tc = threadIdx.x % COLUMN_PARTIAL_COLS, tr = threadIdx.x / COLUMN_PARTIAL_COLS;
    const int64_t col = int64_t(blockIdx.x) * COLUMN_PARTIAL_COLS + tc;
    const int64_t n_chunks = (n_rows + kChunkRows - 1) / kChunkRows;
    for (int64_t chunk = blockIdx.y; chunk < n_chunks; chunk += gridDim.y) {
        const int64_t r0 = chunk * kChunkRows, r1 = min(n_rows, r0 + kChunkRows);
        float acc[NS] = {};
        if (col < C)
            for (int64_t r = r0 + tr; r < r1; r += COLUMN_PARTIAL_ROW_LANES) add_row(r, col, acc);
#pragma unroll
        for (int k = 0; k < NS; ++k) lanes[k][tr][tc] = acc[k];
        __syncthreads();
        if (tr == 0 && col < C) {
#pragma unroll
            for (int k = 0; k < NS; ++k) {
                for (int i = 1; i < COLUMN_PARTIAL_ROW_LANES; ++i) acc[k] += lanes[k][i][tc];
                s.partial[k][chunk * C + col] = acc[k];
            }
        }
        __syncthreads();  // the lanes are written again for the next chunk
    }
}

/// s.out[k][col] += the sum over chunks, in order, of s.partial[k][chunk * C + col], every column.
template <int NS>
__global__ void column_chunk_reduce_kernel(ColumnSums<NS> s, int64_t n_chunks, int64_t C) {
    for (int64_t col = thread_index(); col < C; col += grid_stride()) {
        float acc[NS] = {};
        for (int64_t i = 0; i < n_chunks; ++i)
#pragma unroll
            for (int k = 0; k < NS; ++k) acc[k] += s.partial[k][i * C + col];
#pragma unroll
        for (int k = 0; k < NS; ++k)
            if (s.out[k]) s.out[k][col] += acc[k];
    }
}

/// Launch column_chunk_reduce_kernel on `stream` (the second half of a column sum).
template <int NS>
void column_chunk_reduce(const ColumnSums<NS>& s, int64_t n_chunks, int64_t C, cudaStream_t stream) {
    column_chunk_reduce_kernel<NS><<<grid_for(C, 256), 256, 0, stream>>>(s, n_chunks, C);
    cuda_check_kernel("column_chunk_reduce_kernel");
}

}  // namespace skew::cuda
