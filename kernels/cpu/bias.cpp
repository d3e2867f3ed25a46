// CPU bias add of a linear layer's output rows and its backward, the bias gradient as column sums
// (model.attention_bias, docs/architectures.md "Attention biases"). The column sums run over rows
// in order 0..n_rows-1 per column, so the result does not depend on the thread count.
// Semantics: Backend::bias_add_* in kernels/backend.h.
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void bias_add_forward(T* out, const float* bias, int64_t n_rows, int64_t channels) {
    check_nonneg("bias_add_forward n_rows", n_rows);
    check_nonneg("bias_add_forward channels", channels);
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t r = 0; r < n_rows; ++r) {
        T* o = out + r * channels;
        for (int64_t c = 0; c < channels; ++c) store(o + c, load(o[c]) + bias[c]);
    }
}

template <class T>
void bias_add_backward(float* dbias, const T* dout, int64_t n_rows, int64_t channels) {
    check_nonneg("bias_add_backward n_rows", n_rows);
    check_nonneg("bias_add_backward channels", channels);
    const int64_t block = 64;  // columns per task; each column's rows summed in order
    const int64_t n_blocks = (channels + block - 1) / block;
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t cb = 0; cb < n_blocks; ++cb) {
        const int64_t c0 = cb * block, c1 = std::min(channels, c0 + block);
        float s[64] = {};
        for (int64_t r = 0; r < n_rows; ++r) {
            const T* g = dout + r * channels;
            for (int64_t c = c0; c < c1; ++c) s[c - c0] += load(g[c]);
        }
        for (int64_t c = c0; c < c1; ++c) dbias[c] += s[c - c0];
    }
}

template void bias_add_forward<bf16>(bf16*, const float*, int64_t, int64_t);
template void bias_add_forward<float>(float*, const float*, int64_t, int64_t);
template void bias_add_backward<bf16>(float*, const bf16*, int64_t, int64_t);
template void bias_add_backward<float>(float*, const float*, int64_t, int64_t);

}  // namespace skew::cpu
