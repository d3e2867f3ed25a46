// CPU SwiGLU activation h = silu(a) * b and its backward: the inner product of the feed-forward
// w3(silu(w1 x) * w2 x) (docs/design.md, "The paper's model"; dense block and every expert).
// Formulas: kernels/common/activations.h, shared with the CUDA kernels.
#include <omp.h>

#include "kernels/common/activations.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void swiglu_forward(T* h, const T* a, const T* b, int64_t n) {
    check_nonneg("swiglu_forward n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store(h + i, silu_f32(load(a[i])) * load(b[i]));
}

template <class T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, int64_t n) {
    check_nonneg("swiglu_backward n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) {
        const float av = load(a[i]), bv = load(b[i]), g = load(dh[i]);
        const float sg = sigmoid_f32(av);  // one exp: silu = a·σ(a), silu' = σ(a)·(1 + a·(1 - σ(a)))
        store(da + i, g * bv * (sg * (1.0f + av * (1.0f - sg))));
        store(db + i, g * (av * sg));
    }
}

template void swiglu_forward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_backward<bf16>(bf16*, bf16*, const bf16*, const bf16*, const bf16*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);

}  // namespace skew::cpu
