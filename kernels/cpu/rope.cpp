// CPU rotary position embedding (kernels/common/rope_math.h; semantics: Backend::rope in
// kernels/backend.h): each (token, head) row rotated in place, the angles computed once per position.
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/common/rope_math.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void rope(T* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
          bool inverse) {
    check_nonneg("rope batch", batch);
    check_nonneg("rope seq_len", seq_len);
    check_nonneg("rope n_heads", n_heads);
    check_nonneg("rope pos0", pos0);
    if (head_dim <= 0 || head_dim % 2 != 0) fail("rope: head_dim {} is not a positive even number", head_dim);
    const int64_t half = head_dim / 2;
    std::vector<float> cs(size_t(seq_len * half)), sn(size_t(seq_len * half));
    for (int64_t t = 0; t < seq_len; ++t)
        for (int64_t i = 0; i < half; ++i) {
            const float a = rope_angle(pos0 + t, i, head_dim, theta);
            cs[size_t(t * half + i)] = std::cos(a);
            sn[size_t(t * half + i)] = std::sin(a);
        }
    const float sign = inverse ? -1.0f : 1.0f;
    const int64_t rows = batch * seq_len * n_heads;
#pragma omp parallel for schedule(static) if (rows * head_dim > kParallelMinWork)
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = (r / n_heads) % seq_len;
        T* v = x + r * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            float lo = load(v[i]), hi = load(v[i + half]);
            rope_rotate(lo, hi, cs[size_t(t * half + i)], sn[size_t(t * half + i)], sign);
            store(v + i, lo);
            store(v + i + half, hi);
        }
    }
}

template void rope<bf16>(bf16*, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool);
template void rope<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool);

}  // namespace skew::cpu
