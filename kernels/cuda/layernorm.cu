// CUDA LayerNorm forward and backward (docs/design.md, "The paper's model": pre-LayerNorm, fp32
// parameters). One warp per row; the parameter gradients are summed over rows in fixed chunks, then
// over chunks in order, so they do not depend on timing. CPU twin: kernels/cpu/layernorm.cpp.
#include "kernels/cuda/column_partials.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

__global__ void layernorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const bf16* __restrict__ inp, const float* __restrict__ weight,
                                         const float* __restrict__ bias, int64_t n_rows, int64_t C, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    const bf16* x = inp + row * C;
    float sum = 0.0f;
    for (int64_t c = lane; c < C; c += 32) sum += ld(x[c]);
    const float mu = warp_sum(sum) / float(C);
    float var = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float d = ld(x[c]) - mu;
        var += d * d;
    }
    const float rs = rsqrtf(warp_sum(var) / float(C) + eps);
    bf16* o = out + row * C;
    for (int64_t c = lane; c < C; c += 32) st(o + c, (ld(x[c]) - mu) * rs * weight[c] + bias[c]);
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

__global__ void layernorm_backward_dinp_kernel(bf16* __restrict__ dinp, const bf16* __restrict__ dout,
                                               const bf16* __restrict__ inp, const float* __restrict__ weight,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               int64_t n_rows, int64_t C, bool accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    const bf16* x = inp + row * C;
    const bf16* g = dout + row * C;
    const float mu = mean[row], rs = rstd[row];
    // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float norm = (ld(x[c]) - mu) * rs;
        const float dnorm = ld(g[c]) * weight[c];
        s1 += dnorm;
        s2 += dnorm * norm;
    }
    const float dnorm_mean = warp_sum(s1) / float(C), dnorm_norm_mean = warp_sum(s2) / float(C);
    bf16* dx = dinp + row * C;
    for (int64_t c = lane; c < C; c += 32) {
        const float norm = (ld(x[c]) - mu) * rs;
        const float dnorm = ld(g[c]) * weight[c];
        float v = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        if (accumulate) v += ld(dx[c]);
        st(dx + c, v);
    }
}

// dweight's and dbias's partial sums over row chunks (kernels/cuda/column_partials.cuh):
// dout·(x - mean)·rstd and dout per row.
__global__ void layernorm_param_partials_kernel(ColumnSums<2> s, const bf16* __restrict__ dout,
                                                const bf16* __restrict__ inp, const float* __restrict__ mean,
                                                const float* __restrict__ rstd, int64_t n_rows, int64_t C) {
    column_chunk_partials<2>(s, n_rows, C, [&](int64_t r, int64_t col, float(&acc)[2]) {
        const float gv = ld(dout[r * C + col]);
        acc[0] += gv * (ld(inp[r * C + col]) - mean[r]) * rstd[r];
        acc[1] += gv;
    });
}

int64_t param_chunks(int64_t n_rows) { return cuda_ws::layernorm_param_chunks(n_rows); }

}  // namespace

// ---- launchers

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                       int64_t n_rows, int64_t channels, float eps, cudaStream_t stream) {
    check_nonneg("layernorm_forward n_rows", n_rows);
    check_nonneg("layernorm_forward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const unsigned blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    layernorm_forward_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, weight, bias, n_rows,
                                                                        channels, eps);
    cuda_check_kernel("layernorm_forward_kernel");
}

int64_t layernorm_backward_scratch_bytes(int64_t n_rows, int64_t channels) {
    return cuda_ws::layernorm_backward_scratch_bytes(n_rows, channels);
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t n_rows, int64_t channels,
                        bool accumulate_dinp, void* scratch, cudaStream_t stream) {
    check_nonneg("layernorm_backward n_rows", n_rows);
    check_nonneg("layernorm_backward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    if (dinp) {
        const unsigned blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
        layernorm_backward_dinp_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, mean, rstd,
                                                                                  n_rows, channels, accumulate_dinp);
        cuda_check_kernel("layernorm_backward_dinp_kernel");
    }
    if (dweight || dbias) {
        const int64_t chunks = param_chunks(n_rows);
        float* pw = static_cast<float*>(scratch);
        const ColumnSums<2> sums{{dweight, dbias}, {pw, pw + chunks * channels}};
        layernorm_param_partials_kernel<<<column_partials_grid(channels, chunks), COLUMN_PARTIAL_THREADS, 0, stream>>>(
            sums, dout, inp, mean, rstd, n_rows, channels);
        cuda_check_kernel("layernorm_param_partials_kernel");
        column_chunk_reduce(sums, chunks, channels, stream);
    }
}

}  // namespace skew::cuda
