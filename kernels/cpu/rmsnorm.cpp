// CPU RMSNorm (Llama-family models; docs/architectures.md): forward saving rstd, and backward. The
// weight gradient is reduced over rows per channel in a fixed order, so results do not depend on the
// thread count. Semantics: Backend::rmsnorm_* in kernels/backend.h.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t n_rows, int64_t channels,
                     float eps) {
    check_nonneg("rmsnorm_forward n_rows", n_rows);
    check_nonneg("rmsnorm_forward channels", channels);
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t r = 0; r < n_rows; ++r) {
        const T* x = inp + r * channels;
        double ss = 0.0;
        for (int64_t c = 0; c < channels; ++c) ss += double(load(x[c])) * double(load(x[c]));
        const float rs = float(1.0 / std::sqrt(ss / double(std::max<int64_t>(1, channels)) + double(eps)));
        T* o = out + r * channels;
        for (int64_t c = 0; c < channels; ++c) store(o + c, load(x[c]) * rs * weight[c]);
        if (rstd) rstd[r] = rs;
    }
}

template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd,
                      int64_t n_rows, int64_t channels, bool accumulate_dinp) {
    check_nonneg("rmsnorm_backward n_rows", n_rows);
    check_nonneg("rmsnorm_backward channels", channels);
    if (dinp) {
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
        for (int64_t r = 0; r < n_rows; ++r) {
            const T* x = inp + r * channels;
            const T* g = dout + r * channels;
            const float rs = rstd[r];
            float dot = 0.0f;  // mean(dnorm * norm)
            for (int64_t c = 0; c < channels; ++c) dot += load(g[c]) * weight[c] * load(x[c]) * rs;
            dot /= float(std::max<int64_t>(1, channels));
            T* dx = dinp + r * channels;
            for (int64_t c = 0; c < channels; ++c) {
                const float norm = load(x[c]) * rs;
                float v = (load(g[c]) * weight[c] - norm * dot) * rs;
                if (accumulate_dinp) v += load(dx[c]);
                store(dx + c, v);
            }
        }
    }
    if (dweight) {
        const int64_t block = 64;
        const int64_t n_blocks = (channels + block - 1) / block;
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
        for (int64_t cb = 0; cb < n_blocks; ++cb) {
            const int64_t c0 = cb * block, c1 = std::min(channels, c0 + block);
            float dw[64] = {};
            for (int64_t r = 0; r < n_rows; ++r) {
                const T* x = inp + r * channels;
                const T* g = dout + r * channels;
                for (int64_t c = c0; c < c1; ++c) dw[c - c0] += load(g[c]) * load(x[c]) * rstd[r];
            }
            for (int64_t c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
        }
    }
}

template void rmsnorm_forward<bf16>(bf16*, float*, const bf16*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_backward<bf16>(bf16*, float*, const bf16*, const bf16*, const float*, const float*, int64_t,
                                     int64_t, bool);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int64_t,
                                      int64_t, bool);

}  // namespace skew::cpu
