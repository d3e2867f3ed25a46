// CUDA LayerNorm forward and backward (docs/design.md, "The paper's model": pre-LayerNorm, fp32
// parameters). One warp per row; the parameter gradients are summed over rows in fixed chunks, then
// over chunks in order, so they do not depend on timing. CPU twin: kernels/cpu/layernorm.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kRowsPerBlock = 8;                                    // warps per block, one row each
constexpr int kParamRowChunk = cuda_ws::LAYERNORM_PARAM_ROW_CHUNK;  // rows per partial sum of dweight / dbias
constexpr int kParamCols = 32;                                      // columns per block of the partial-sum kernel
constexpr int kParamRowLanes = 8;                                   // row lanes per block of the partial-sum kernel

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

// Block (column block, row chunk): partial dweight / dbias of kParamCols columns over kParamRowChunk
// rows, written to partial_w/b[chunk][col].
__global__ void layernorm_param_partials_kernel(float* __restrict__ partial_w, float* __restrict__ partial_b,
                                                const bf16* __restrict__ dout, const bf16* __restrict__ inp,
                                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                                int64_t n_rows, int64_t C) {
    __shared__ float sw[kParamRowLanes][kParamCols], sb[kParamRowLanes][kParamCols];
    const int tc = threadIdx.x % kParamCols, tr = threadIdx.x / kParamCols;
    const int64_t col = int64_t(blockIdx.x) * kParamCols + tc;
    const int64_t r0 = int64_t(blockIdx.y) * kParamRowChunk;
    const int64_t r1 = min(n_rows, r0 + kParamRowChunk);
    float dw = 0.0f, db = 0.0f;
    if (col < C) {
        for (int64_t r = r0 + tr; r < r1; r += kParamRowLanes) {
            const float gv = ld(dout[r * C + col]);
            dw += gv * (ld(inp[r * C + col]) - mean[r]) * rstd[r];
            db += gv;
        }
    }
    sw[tr][tc] = dw;
    sb[tr][tc] = db;
    __syncthreads();
    if (tr == 0 && col < C) {
        for (int i = 1; i < kParamRowLanes; ++i) {
            dw += sw[i][tc];
            db += sb[i][tc];
        }
        partial_w[int64_t(blockIdx.y) * C + col] = dw;
        partial_b[int64_t(blockIdx.y) * C + col] = db;
    }
}

__global__ void layernorm_param_reduce_kernel(float* __restrict__ dweight, float* __restrict__ dbias,
                                              const float* __restrict__ partial_w, const float* __restrict__ partial_b,
                                              int64_t n_chunks, int64_t C) {
    const int64_t col = thread_index();
    if (col >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int64_t i = 0; i < n_chunks; ++i) {
        dw += partial_w[i * C + col];
        db += partial_b[i * C + col];
    }
    if (dweight) dweight[col] += dw;
    if (dbias) dbias[col] += db;
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
        float* pb = pw + chunks * channels;
        const dim3 grid(unsigned((channels + kParamCols - 1) / kParamCols), unsigned(chunks));
        layernorm_param_partials_kernel<<<grid, kParamCols * kParamRowLanes, 0, stream>>>(pw, pb, dout, inp, mean, rstd,
                                                                                          n_rows, channels);
        cuda_check_kernel("layernorm_param_partials_kernel");
        layernorm_param_reduce_kernel<<<grid_for(channels, 256), 256, 0, stream>>>(dweight, dbias, pw, pb, chunks,
                                                                                   channels);
        cuda_check_kernel("layernorm_param_reduce_kernel");
    }
}

}  // namespace skew::cuda
