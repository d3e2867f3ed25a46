// CPU LayerNorm with bias and fp32 parameters (docs/design.md: pre-LayerNorm blocks and final LayerNorm,
// fp32 LayerNorm parameters), forward saving mean and rstd, and backward. Parameter gradients are
// reduced over rows per channel in a fixed order, so results do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                       int64_t n_rows, int64_t channels, float eps) {
    check_nonneg("layernorm_forward n_rows", n_rows);
    check_nonneg("layernorm_forward channels", channels);
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t r = 0; r < n_rows; ++r) {
        const T* x = inp + r * channels;
        double sum = 0.0;
        for (int64_t c = 0; c < channels; ++c) sum += load(x[c]);
        const float mu = float(sum / double(channels));
        double var = 0.0;
        for (int64_t c = 0; c < channels; ++c) {
            const double d = double(load(x[c])) - mu;
            var += d * d;
        }
        const float rs = float(1.0 / std::sqrt(var / double(channels) + double(eps)));
        T* o = out + r * channels;
        for (int64_t c = 0; c < channels; ++c) store(o + c, (load(x[c]) - mu) * rs * weight[c] + bias[c]);
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
}

template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                        const float* mean, const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp) {
    check_nonneg("layernorm_backward n_rows", n_rows);
    check_nonneg("layernorm_backward channels", channels);
    if (dinp) {
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
        for (int64_t r = 0; r < n_rows; ++r) {
            const T* x = inp + r * channels;
            const T* g = dout + r * channels;
            const float mu = mean[r], rs = rstd[r];
            // dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            for (int64_t c = 0; c < channels; ++c) {
                const float norm = (load(x[c]) - mu) * rs;
                const float dnorm = load(g[c]) * weight[c];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * norm;
            }
            dnorm_mean /= float(channels);
            dnorm_norm_mean /= float(channels);
            T* dx = dinp + r * channels;
            for (int64_t c = 0; c < channels; ++c) {
                const float norm = (load(x[c]) - mu) * rs;
                const float dnorm = load(g[c]) * weight[c];
                float v = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
                if (accumulate_dinp) v += load(dx[c]);
                store(dx + c, v);
            }
        }
    }
    if (dweight || dbias) {
        const int64_t block = 64;
        const int64_t n_blocks = (channels + block - 1) / block;
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
        for (int64_t cb = 0; cb < n_blocks; ++cb) {
            const int64_t c0 = cb * block, c1 = std::min(channels, c0 + block);
            float dw[64] = {}, db[64] = {};
            for (int64_t r = 0; r < n_rows; ++r) {
                const T* x = inp + r * channels;
                const T* g = dout + r * channels;
                for (int64_t c = c0; c < c1; ++c) {
                    const float gv = load(g[c]);
                    dw[c - c0] += gv * (load(x[c]) - mean[r]) * rstd[r];
                    db[c - c0] += gv;
                }
            }
            for (int64_t c = c0; c < c1; ++c) {
                if (dweight) dweight[c] += dw[c - c0];
                if (dbias) dbias[c] += db[c - c0];
            }
        }
    }
}

template void layernorm_forward<bf16>(bf16*, float*, float*, const bf16*, const float*, const float*, int64_t, int64_t,
                                      float);
template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                       int64_t, float);
template void layernorm_backward<bf16>(bf16*, float*, float*, const bf16*, const bf16*, const float*, const float*,
                                       const float*, int64_t, int64_t, bool);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t, bool);

}  // namespace skew::cpu
