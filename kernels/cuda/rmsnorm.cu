// CUDA RMSNorm forward and backward (docs/architectures.md). One warp per row; the weight gradient
// is summed over rows in fixed chunks, then over chunks in order, so it does not depend on timing.
// CPU twin: kernels/cpu/rmsnorm.cpp.
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

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

// dweight's partial sums over row chunks (kernels/cuda/column_partials.cuh): dout·x·rstd per row.
__global__ void rmsnorm_weight_partials_kernel(ColumnSums<1> s, const bf16* __restrict__ dout,
                                               const bf16* __restrict__ inp, const float* __restrict__ rstd,
                                               int64_t n_rows, int64_t C) {
    column_chunk_partials<1>(s, n_rows, C, [&](int64_t r, int64_t col, float(&acc)[1]) {
        acc[0] += ld(dout[r * C + col]) * ld(inp[r * C + col]) * rstd[r];
    });
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
        const ColumnSums<1> sums{{dweight}, {static_cast<float*>(scratch)}};
        rmsnorm_weight_partials_kernel<<<column_partials_grid(channels, chunks), COLUMN_PARTIAL_THREADS, 0, stream>>>(
            sums, dout, inp, rstd, n_rows, channels);
        cuda_check_kernel("rmsnorm_weight_partials_kernel");
        column_chunk_reduce(sums, chunks, channels, stream);
    }
}

}  // namespace skew::cuda
