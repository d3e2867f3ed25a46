// CPU causal grouped-query attention (docs/design.md, "The paper's model": 32 query heads share 8 KV
// heads; query head h reads KV head h / (n_heads / n_kv_heads)), scale 1/sqrt(head_dim). Forward
// saves the log-sum-exp per query row; backward recomputes the probabilities from it.
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

void check_shape(const char* op, const AttentionShape& s) {
    check_nonneg(op, s.batch);
    check_nonneg(op, s.seq_len);
    if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0)
        fail("{}: n_heads {}, n_kv_heads {} and head_dim {} must be positive", op, s.n_heads, s.n_kv_heads, s.head_dim);
    if (s.n_heads % s.n_kv_heads != 0)
        fail("{}: n_heads {} is not a multiple of n_kv_heads {}", op, s.n_heads, s.n_kv_heads);
}

}  // namespace

namespace {

// Widen the rows of KV head g of batch b (seq_len rows of head_dim) into dst (seq_len, head_dim).
template <class T>
void widen_kv(float* dst, const T* src, int64_t b, int64_t g, int64_t Tn, int64_t KV, int64_t D) {
    for (int64_t j = 0; j < Tn; ++j) {
        const T* r = src + ((b * Tn + j) * KV + g) * D;
        for (int64_t d = 0; d < D; ++d) dst[j * D + d] = load(r[d]);
    }
}

// Σ_d a[d]·b[d] over fp32 rows (vectorized reduction).
inline float dot_f32(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

// y[d] += w·x[d].
inline void axpy_f32(float* y, float w, const float* x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] += w * x[i];
}

}  // namespace

template <class T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const AttentionShape& s) {
    check_shape("attention_forward", s);
    const int64_t B = s.batch, Tn = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const int64_t group = H / KV;
    const float scale = 1.0f / std::sqrt(float(D));
    // One task per (batch, query head): K and V of its KV head widened to fp32 once.
#pragma omp parallel if (B * H * Tn * Tn * D > kParallelMinWork)
    {
        std::vector<float> kf(static_cast<size_t>(Tn * D)), vf(static_cast<size_t>(Tn * D));
        std::vector<float> p(static_cast<size_t>(Tn)), qf(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; ++bh) {
            const int64_t b = bh / H, h = bh % H, g = h / group;
            widen_kv(kf.data(), k, b, g, Tn, KV, D);
            widen_kv(vf.data(), v, b, g, Tn, KV, D);
            for (int64_t t = 0; t < Tn; ++t) {
                const T* qr = q + ((b * Tn + t) * H + h) * D;
                for (int64_t d = 0; d < D; ++d) qf[size_t(d)] = load(qr[d]);
                float mx = -INFINITY;
                for (int64_t j = 0; j <= t; ++j) {
                    p[size_t(j)] = dot_f32(qf.data(), kf.data() + j * D, D) * scale;
                    mx = std::max(mx, p[size_t(j)]);
                }
                float sum = 0.0f;
                for (int64_t j = 0; j <= t; ++j) {
                    p[size_t(j)] = std::exp(p[size_t(j)] - mx);
                    sum += p[size_t(j)];
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t j = 0; j <= t; ++j) axpy_f32(acc.data(), p[size_t(j)], vf.data() + j * D, D);
                T* o = out + ((b * Tn + t) * H + h) * D;
                const float inv = 1.0f / sum;
                for (int64_t d = 0; d < D; ++d) store(o + d, acc[size_t(d)] * inv);
                if (lse) lse[(b * H + h) * Tn + t] = mx + std::log(sum);
            }
        }
    }
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const AttentionShape& s) {
    check_shape("attention_backward", s);
    (void)out;  // the CPU reference forms D = Σ_j p_j·dp_j exactly instead of <dout, out>
    const int64_t B = s.batch, Tn = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const int64_t group = H / KV;
    const float scale = 1.0f / std::sqrt(float(D));
    // One task per (batch, KV head): it owns dk/dv of that head and sums over its query heads.
#pragma omp parallel if (B * H * Tn * Tn * D > kParallelMinWork)
    {
        std::vector<float> kf(static_cast<size_t>(Tn * D)), vf(static_cast<size_t>(Tn * D));
        std::vector<float> dkf(static_cast<size_t>(Tn * D)), dvf(static_cast<size_t>(Tn * D));
        std::vector<float> p(static_cast<size_t>(Tn)), dp(static_cast<size_t>(Tn));
        std::vector<float> qf(static_cast<size_t>(D)), gf(static_cast<size_t>(D)), dqf(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bg = 0; bg < B * KV; ++bg) {
            const int64_t b = bg / KV, g = bg % KV;
            widen_kv(kf.data(), k, b, g, Tn, KV, D);
            widen_kv(vf.data(), v, b, g, Tn, KV, D);
            std::fill(dkf.begin(), dkf.end(), 0.0f);
            std::fill(dvf.begin(), dvf.end(), 0.0f);
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                for (int64_t t = 0; t < Tn; ++t) {
                    const int64_t row = (b * Tn + t) * H + h;
                    for (int64_t d = 0; d < D; ++d) {
                        qf[size_t(d)] = load(q[row * D + d]);
                        gf[size_t(d)] = load(dout[row * D + d]);
                    }
                    const float l = lse[(b * H + h) * Tn + t];
                    float dsum = 0.0f;
                    for (int64_t j = 0; j <= t; ++j) {
                        p[size_t(j)] = std::exp(dot_f32(qf.data(), kf.data() + j * D, D) * scale - l);
                        dp[size_t(j)] = dot_f32(gf.data(), vf.data() + j * D, D);
                        dsum += p[size_t(j)] * dp[size_t(j)];
                    }
                    std::fill(dqf.begin(), dqf.end(), 0.0f);
                    for (int64_t j = 0; j <= t; ++j) {
                        const float ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * scale;
                        axpy_f32(dqf.data(), ds, kf.data() + j * D, D);
                        axpy_f32(dkf.data() + j * D, ds, qf.data(), D);
                        axpy_f32(dvf.data() + j * D, p[size_t(j)], gf.data(), D);
                    }
                    for (int64_t d = 0; d < D; ++d) store(dq + row * D + d, dqf[size_t(d)]);
                }
            }
            for (int64_t j = 0; j < Tn; ++j) {
                const int64_t row = (b * Tn + j) * KV + g;
                for (int64_t d = 0; d < D; ++d) {
                    store(dk + row * D + d, dkf[size_t(j * D + d)]);
                    store(dv + row * D + d, dvf[size_t(j * D + d)]);
                }
            }
        }
    }
}

template void attention_forward<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*, const AttentionShape&);
template void attention_forward<float>(float*, float*, const float*, const float*, const float*, const AttentionShape&);
template void attention_backward<bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*, const bf16*,
                                       const bf16*, const float*, const AttentionShape&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, const float*, const AttentionShape&);

}  // namespace skew::cpu
