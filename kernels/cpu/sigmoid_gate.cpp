// CPU sigmoid gate and its backward: the shared experts' output scaled per token by
// sigmoid(x · w_gate) (Qwen2-MoE's shared_expert_gate; docs/architectures.md, "Shared experts").
// The sigmoid of kernels/common/activations.h, shared with the CUDA twin kernels/cuda/sigmoid_gate.cu.
#include "kernels/common/activations.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void sigmoid_gate_forward(T* out, const float* logit, const T* s, int64_t n_rows, int64_t channels, bool accumulate) {
    check_nonneg("sigmoid_gate_forward n_rows", n_rows);
    check_nonneg("sigmoid_gate_forward channels", channels);
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t r = 0; r < n_rows; ++r) {
        const float g = sigmoid_f32(logit[r]);
        T* o = out + r * channels;
        const T* x = s + r * channels;
        for (int64_t c = 0; c < channels; ++c) store(o + c, (accumulate ? load(o[c]) : 0.0f) + g * load(x[c]));
    }
}

template <class T>
void sigmoid_gate_backward(T* ds, float* dlogit, const T* dout, const float* logit, const T* s, int64_t n_rows,
                           int64_t channels) {
    check_nonneg("sigmoid_gate_backward n_rows", n_rows);
    check_nonneg("sigmoid_gate_backward channels", channels);
#pragma omp parallel for schedule(static) if (n_rows * channels > kParallelMinWork)
    for (int64_t r = 0; r < n_rows; ++r) {
        const float g = sigmoid_f32(logit[r]);
        const T* dy = dout + r * channels;
        const T* x = s + r * channels;
        if (dlogit) {
            float dot = 0.0f;  // in column order
            for (int64_t c = 0; c < channels; ++c) dot += load(dy[c]) * load(x[c]);
            dlogit[r] = g * (1.0f - g) * dot;
        }
        if (ds)
            for (int64_t c = 0; c < channels; ++c) store(ds + r * channels + c, g * load(dy[c]));
    }
}

template void sigmoid_gate_forward<bf16>(bf16*, const float*, const bf16*, int64_t, int64_t, bool);
template void sigmoid_gate_forward<float>(float*, const float*, const float*, int64_t, int64_t, bool);
template void sigmoid_gate_backward<bf16>(bf16*, float*, const bf16*, const float*, const bf16*, int64_t, int64_t);
template void sigmoid_gate_backward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t);

}  // namespace skew::cpu
