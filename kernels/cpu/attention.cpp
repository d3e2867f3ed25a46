// CPU causal grouped-query attention (design.md, "The paper's model": 32 query heads share 8 KV
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

template <class T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const AttentionShape& s) {
    check_shape("attention_forward", s);
    const int64_t B = s.batch, Tn = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const int64_t group = H / KV;
    const float scale = 1.0f / std::sqrt(float(D));
#pragma omp parallel if (B * H * Tn * Tn * D > kParallelMinWork)
    {
        std::vector<float> p(static_cast<size_t>(Tn)), qf(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 4) collapse(2)
        for (int64_t bh = 0; bh < B * H; ++bh) {
            for (int64_t t = 0; t < Tn; ++t) {
                const int64_t b = bh / H, h = bh % H, g = h / group;
                const T* qr = q + ((b * Tn + t) * H + h) * D;
                for (int64_t d = 0; d < D; ++d) qf[size_t(d)] = load(qr[d]);
                float mx = -INFINITY;
                for (int64_t j = 0; j <= t; ++j) {
                    const T* kr = k + ((b * Tn + j) * KV + g) * D;
                    float dot = 0.0f;
                    for (int64_t d = 0; d < D; ++d) dot += qf[size_t(d)] * load(kr[d]);
                    p[size_t(j)] = dot * scale;
                    mx = std::max(mx, p[size_t(j)]);
                }
                float sum = 0.0f;
                for (int64_t j = 0; j <= t; ++j) {
                    p[size_t(j)] = std::exp(p[size_t(j)] - mx);
                    sum += p[size_t(j)];
                }
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t j = 0; j <= t; ++j) {
                    const T* vr = v + ((b * Tn + j) * KV + g) * D;
                    const float w = p[size_t(j)];
                    for (int64_t d = 0; d < D; ++d) acc[size_t(d)] += w * load(vr[d]);
                }
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
        std::vector<float> dkf(static_cast<size_t>(Tn * D)), dvf(static_cast<size_t>(Tn * D)),
            p(static_cast<size_t>(Tn)), dp(static_cast<size_t>(Tn));
        std::vector<float> qf(static_cast<size_t>(D)), gf(static_cast<size_t>(D)), dqf(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bg = 0; bg < B * KV; ++bg) {
            const int64_t b = bg / KV, g = bg % KV;
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
                        const T* kr = k + ((b * Tn + j) * KV + g) * D;
                        const T* vr = v + ((b * Tn + j) * KV + g) * D;
                        float dot = 0.0f, dvdot = 0.0f;
                        for (int64_t d = 0; d < D; ++d) {
                            dot += qf[size_t(d)] * load(kr[d]);
                            dvdot += gf[size_t(d)] * load(vr[d]);
                        }
                        p[size_t(j)] = std::exp(dot * scale - l);
                        dp[size_t(j)] = dvdot;
                        dsum += p[size_t(j)] * dvdot;
                    }
                    std::fill(dqf.begin(), dqf.end(), 0.0f);
                    for (int64_t j = 0; j <= t; ++j) {
                        const float pj = p[size_t(j)];
                        const float ds = pj * (dp[size_t(j)] - dsum) * scale;
                        const T* kr = k + ((b * Tn + j) * KV + g) * D;
                        float* dkr = dkf.data() + j * D;
                        float* dvr = dvf.data() + j * D;
                        for (int64_t d = 0; d < D; ++d) {
                            dqf[size_t(d)] += ds * load(kr[d]);
                            dkr[d] += ds * qf[size_t(d)];
                            dvr[d] += pj * gf[size_t(d)];
                        }
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
