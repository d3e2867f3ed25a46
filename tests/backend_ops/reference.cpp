// Double-precision evaluations of the Backend ops from their definitions in kernels/backend.h
// (tests/backend_ops/reference.h).
#include "tests/backend_ops/reference.h"

#include <algorithm>
#include <cmath>

namespace skew::ops::ref {

namespace {
size_t z(int64_t i) { return size_t(i); }
}  // namespace

void matmul(Vec& c, const Vec& a, const Vec& b, const MatmulShape& s) {
    for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < s.k; ++p) {
                const double x = s.trans_a ? a[z(p * s.m + i)] : a[z(i * s.k + p)];
                const double y = s.trans_b ? b[z(j * s.k + p)] : b[z(p * s.n + j)];
                acc += x * y;
            }
            double& o = c[z(i * s.n + j)];
            o = double(s.alpha) * acc + (s.beta == 0.0f ? 0.0 : double(s.beta) * o);
        }
}

void embedding_forward(Vec& out, const Vec& tokens, const Vec& wte, const Vec& wpe, int64_t B, int64_t T, int64_t C) {
    for (int64_t i = 0; i < B * T; ++i)
        for (int64_t c = 0; c < C; ++c)
            out[z(i * C + c)] = wte[z(int64_t(tokens[z(i)]) * C + c)] + wpe[z((i % T) * C + c)];
}

void embedding_backward(Vec* dwte, Vec* dwpe, const Vec& dout, const Vec& tokens, int64_t B, int64_t T, int64_t C) {
    for (int64_t i = 0; i < B * T; ++i)
        for (int64_t c = 0; c < C; ++c) {
            if (dwte) (*dwte)[z(int64_t(tokens[z(i)]) * C + c)] += dout[z(i * C + c)];
            if (dwpe) (*dwpe)[z((i % T) * C + c)] += dout[z(i * C + c)];
        }
}

void layernorm_forward(Vec& out, Vec* mean, Vec* rstd, const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C,
                       double eps) {
    for (int64_t r = 0; r < N; ++r) {
        double m = 0.0, var = 0.0;
        for (int64_t c = 0; c < C; ++c) m += x[z(r * C + c)];
        m /= double(C);
        for (int64_t c = 0; c < C; ++c) var += (x[z(r * C + c)] - m) * (x[z(r * C + c)] - m);
        const double rs = 1.0 / std::sqrt(var / double(C) + eps);
        for (int64_t c = 0; c < C; ++c) out[z(r * C + c)] = (x[z(r * C + c)] - m) * rs * w[z(c)] + b[z(c)];
        if (mean) (*mean)[z(r)] = m;
        if (rstd) (*rstd)[z(r)] = rs;
    }
}

void layernorm_backward(Vec& dx, Vec* dw, Vec* db, const Vec& dout, const Vec& x, const Vec& w, const Vec& mean,
                        const Vec& rstd, int64_t N, int64_t C, bool accumulate) {
    for (int64_t r = 0; r < N; ++r) {
        double mg = 0.0, mgx = 0.0;
        for (int64_t c = 0; c < C; ++c) {
            const double xh = (x[z(r * C + c)] - mean[z(r)]) * rstd[z(r)], g = dout[z(r * C + c)] * w[z(c)];
            mg += g;
            mgx += g * xh;
            if (dw) (*dw)[z(c)] += dout[z(r * C + c)] * xh;
            if (db) (*db)[z(c)] += dout[z(r * C + c)];
        }
        mg /= double(C);
        mgx /= double(C);
        for (int64_t c = 0; c < C; ++c) {
            const double xh = (x[z(r * C + c)] - mean[z(r)]) * rstd[z(r)], g = dout[z(r * C + c)] * w[z(c)];
            const double v = rstd[z(r)] * (g - mg - xh * mgx);
            dx[z(r * C + c)] = accumulate ? dx[z(r * C + c)] + v : v;
        }
    }
}

void rmsnorm_forward(Vec& out, Vec* rstd, const Vec& x, const Vec& w, int64_t N, int64_t C, double eps) {
    for (int64_t r = 0; r < N; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < C; ++c) ss += x[z(r * C + c)] * x[z(r * C + c)];
        const double rs = 1.0 / std::sqrt(ss / double(C) + eps);
        for (int64_t c = 0; c < C; ++c) out[z(r * C + c)] = x[z(r * C + c)] * rs * w[z(c)];
        if (rstd) (*rstd)[z(r)] = rs;
    }
}

void rmsnorm_backward(Vec& dx, Vec* dw, const Vec& dout, const Vec& x, const Vec& w, const Vec& rstd, int64_t N,
                      int64_t C, bool accumulate) {
    for (int64_t r = 0; r < N; ++r) {
        double mgx = 0.0;  // mean(g * xh), g = dout * w, xh = x * rstd
        for (int64_t c = 0; c < C; ++c) {
            const double xh = x[z(r * C + c)] * rstd[z(r)];
            mgx += dout[z(r * C + c)] * w[z(c)] * xh;
            if (dw) (*dw)[z(c)] += dout[z(r * C + c)] * xh;
        }
        mgx /= double(C);
        for (int64_t c = 0; c < C; ++c) {
            const double xh = x[z(r * C + c)] * rstd[z(r)];
            const double v = rstd[z(r)] * (dout[z(r * C + c)] * w[z(c)] - xh * mgx);
            dx[z(r * C + c)] = accumulate ? dx[z(r * C + c)] + v : v;
        }
    }
}

void rope(Vec& x, int64_t B, int64_t T, int64_t H, int64_t d, int64_t pos0, double theta, bool inverse) {
    const double sign = inverse ? -1.0 : 1.0;
    for (int64_t r = 0; r < B * T * H; ++r) {
        const int64_t t = (r / H) % T;
        for (int64_t i = 0; i < d / 2; ++i) {
            const double a = double(pos0 + t) * std::pow(theta, -2.0 * double(i) / double(d));
            const double lo = x[z(r * d + i)], hi = x[z(r * d + i + d / 2)];
            x[z(r * d + i)] = lo * std::cos(a) - hi * sign * std::sin(a);
            x[z(r * d + i + d / 2)] = hi * std::cos(a) + lo * sign * std::sin(a);
        }
    }
}

namespace {
// The probabilities P[t][j] of one (batch, head), j <= off + t (query row t at position off + t,
// off = kv_len - seq_len), and the row's lse.
void attention_probs(std::vector<Vec>& P, Vec& lse_row, const Vec& q, const Vec& k, const AttentionShape& s, int64_t b,
                     int64_t h) {
    const int64_t T = s.seq_len, Tk = s.keys(), H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim, g = h / (H / KV);
    const double sc = 1.0 / std::sqrt(double(D));
    P.assign(z(T), Vec());
    lse_row.assign(z(T), 0.0);
    for (int64_t t = 0; t < T; ++t) {
        Vec& p = P[z(t)];
        p.resize(z(Tk - T + t + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j < int64_t(p.size()); ++j) {
            double d = 0.0;
            for (int64_t c = 0; c < D; ++c)
                d += q[z(((b * T + t) * H + h) * D + c)] * k[z(((b * Tk + j) * KV + g) * D + c)];
            p[z(j)] = d * sc;
            mx = std::max(mx, p[z(j)]);
        }
        double sum = 0.0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (auto& x : p) x /= sum;
        lse_row[z(t)] = mx + std::log(sum);
    }
}
}  // namespace

void attention_forward(Vec& out, Vec& lse, const Vec& q, const Vec& k, const Vec& v, const AttentionShape& s) {
    const int64_t B = s.batch, T = s.seq_len, Tk = s.keys(), H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    std::vector<Vec> P;
    Vec l;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / KV);
            attention_probs(P, l, q, k, s, b, h);
            for (int64_t t = 0; t < T; ++t) {
                lse[z((b * H + h) * T + t)] = l[z(t)];
                for (int64_t c = 0; c < D; ++c) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < int64_t(P[z(t)].size()); ++j)
                        acc += P[z(t)][z(j)] * v[z(((b * Tk + j) * KV + g) * D + c)];
                    out[z(((b * T + t) * H + h) * D + c)] = acc;
                }
            }
        }
}

void attention_backward(Vec& dq, Vec& dk, Vec& dv, const Vec& dout, const Vec& q, const Vec& k, const Vec& v,
                        const AttentionShape& s) {  // kv_len = seq_len (the backends' backward takes no other)
    const int64_t B = s.batch, T = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const double sc = 1.0 / std::sqrt(double(D));
    std::fill(dq.begin(), dq.end(), 0.0);
    std::fill(dk.begin(), dk.end(), 0.0);
    std::fill(dv.begin(), dv.end(), 0.0);
    std::vector<Vec> P;
    Vec l;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / KV);
            attention_probs(P, l, q, k, s, b, h);
            for (int64_t t = 0; t < T; ++t) {
                const auto qi = [&](int64_t c) { return z(((b * T + t) * H + h) * D + c); };
                // dP_j = dout_t · v_j; dS_j = P_j (dP_j - Σ_i P_i dP_i)
                Vec dp(z(t + 1));
                double sum = 0.0;
                for (int64_t j = 0; j <= t; ++j) {
                    double d = 0.0;
                    for (int64_t c = 0; c < D; ++c) d += dout[qi(c)] * v[z(((b * T + j) * KV + g) * D + c)];
                    dp[z(j)] = d;
                    sum += P[z(t)][z(j)] * d;
                }
                for (int64_t j = 0; j <= t; ++j) {
                    const double p = P[z(t)][z(j)], ds = p * (dp[z(j)] - sum) * sc;
                    for (int64_t c = 0; c < D; ++c) {
                        const size_t kj = z(((b * T + j) * KV + g) * D + c);
                        dq[qi(c)] += ds * k[kj];
                        dk[kj] += ds * q[qi(c)];
                        dv[kj] += p * dout[qi(c)];
                    }
                }
            }
        }
}

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void swiglu_forward(Vec& h, const Vec& a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) h[i] = a[i] * sigmoid(a[i]) * b[i];
}

void swiglu_backward(Vec& da, Vec& db, const Vec& dh, const Vec& a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) {
        const double s = sigmoid(a[i]);
        da[i] = dh[i] * b[i] * s * (1.0 + a[i] * (1.0 - s));
        db[i] = dh[i] * a[i] * s;
    }
}

RouterOut moe_router_forward(const Vec& noisy, const Vec& clean, const RouterShape& s, double alpha, double zc,
                             bool normalize) {
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    RouterOut r;
    r.probs.assign(z(n * E), 0.0);
    r.expert_idx.assign(z(n * K), 0.0);
    r.gates.assign(z(n * K), 0.0);
    r.counts.assign(z(E), 0.0);
    r.mean_probs.assign(z(E), 0.0);
    for (int64_t t = 0; t < n; ++t) {
        double mx = -INFINITY, sum = 0.0, cm = -INFINITY, cs = 0.0;
        for (int64_t e = 0; e < E; ++e) mx = std::max(mx, noisy[z(t * E + e)]), cm = std::max(cm, clean[z(t * E + e)]);
        for (int64_t e = 0; e < E; ++e)
            sum += std::exp(noisy[z(t * E + e)] - mx), cs += std::exp(clean[z(t * E + e)] - cm);
        for (int64_t e = 0; e < E; ++e) r.probs[z(t * E + e)] = std::exp(noisy[z(t * E + e)] - mx) / sum;
        const double lse = cm + std::log(cs);
        r.z += lse * lse;
        std::vector<bool> taken(z(E), false);
        double psum = 0.0;
        for (int64_t j = 0; j < K; ++j) {
            int64_t best = -1;
            // by the probabilities as the fp32 tensor holds them (ties, e.g. several underflowed to 0, go
            // to the lower index)
            for (int64_t e = 0; e < E; ++e)
                if (!taken[z(e)] && (best < 0 || float(r.probs[z(t * E + e)]) > float(r.probs[z(t * E + best)])))
                    best = e;
            taken[z(best)] = true;
            r.expert_idx[z(t * K + j)] = double(best);
            r.gates[z(t * K + j)] = r.probs[z(t * E + best)];
            psum += r.probs[z(t * E + best)];
            r.counts[z(best)] += 1.0;
        }
        if (K > 1 && normalize)
            for (int64_t j = 0; j < K; ++j) r.gates[z(t * K + j)] /= psum;
        for (int64_t e = 0; e < E; ++e) r.mean_probs[z(e)] += r.probs[z(t * E + e)];
    }
    double bal = 0.0;
    for (int64_t e = 0; e < E; ++e) {
        r.mean_probs[z(e)] = n > 0 ? r.mean_probs[z(e)] / double(n) : 0.0;
        bal += r.mean_probs[z(e)] * (n > 0 ? r.counts[z(e)] / double(n * K) : 0.0);
    }
    r.balance = alpha * double(E) * bal;
    r.z = n > 0 ? zc * r.z / double(n) : 0.0;
    return r;
}

void moe_router_backward(Vec& dlogits, const Vec& dgates, const Vec& clean, const Vec& probs, const Vec& expert_idx,
                         const Vec& counts, double d_balance, double d_z, const RouterShape& s, double alpha, double zc,
                         bool normalize) {
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    for (int64_t t = 0; t < n; ++t) {
        // d total / d p_e: balance α·E·f_e/n, plus the gates' share (g_j = p_j / P for K > 1 when
        // normalizing, else g_j = p_j)
        Vec dp(z(E));
        for (int64_t e = 0; e < E; ++e)
            dp[z(e)] = d_balance * alpha * double(E) * counts[z(e)] / double(n * K) / double(n);
        double P = 0.0;
        for (int64_t j = 0; j < K; ++j) P += probs[z(t * E + int64_t(expert_idx[z(t * K + j)]))];
        for (int64_t j = 0; j < K; ++j) {
            const int64_t ej = int64_t(expert_idx[z(t * K + j)]);
            if (K == 1 || !normalize) {
                dp[z(ej)] += dgates.empty() ? 0.0 : dgates[z(t * K + j)];
                continue;
            }
            // ∂g_i/∂p_j = (δ_ij - g_i) / P over the chosen set
            for (int64_t i = 0; i < K; ++i) {
                const double gi = probs[z(t * E + int64_t(expert_idx[z(t * K + i)]))] / P;
                const double dgi = dgates.empty() ? 0.0 : dgates[z(t * K + i)];
                dp[z(ej)] += dgi * ((i == j ? 1.0 : 0.0) - gi) / P;
            }
        }
        double pdp = 0.0;
        for (int64_t e = 0; e < E; ++e) pdp += probs[z(t * E + e)] * dp[z(e)];
        double cm = -INFINITY, cs = 0.0;
        for (int64_t e = 0; e < E; ++e) cm = std::max(cm, clean[z(t * E + e)]);
        for (int64_t e = 0; e < E; ++e) cs += std::exp(clean[z(t * E + e)] - cm);
        const double lse = cm + std::log(cs);
        for (int64_t e = 0; e < E; ++e) {
            const double q = std::exp(clean[z(t * E + e)] - lse);
            dlogits[z(t * E + e)] = probs[z(t * E + e)] * (dp[z(e)] - pdp) + d_z * zc * 2.0 * lse * q / double(n);
        }
    }
}

void moe_dispatch(Vec& sorted_to_copy, Vec& copy_to_sorted, Vec& offsets, const Vec& expert_idx, int64_t E) {
    const int64_t m = int64_t(expert_idx.size());
    offsets.assign(z(E + 1), 0.0);
    for (int64_t j = 0; j < m; ++j) offsets[z(int64_t(expert_idx[z(j)]) + 1)] += 1.0;
    for (int64_t e = 0; e < E; ++e) offsets[z(e + 1)] += offsets[z(e)];
    Vec next(offsets.begin(), offsets.end() - 1);
    sorted_to_copy.assign(z(m), 0.0);
    copy_to_sorted.assign(z(m), 0.0);
    for (int64_t j = 0; j < m; ++j) {
        const int64_t p = int64_t(next[z(int64_t(expert_idx[z(j)]))]++);
        sorted_to_copy[z(p)] = double(j);
        copy_to_sorted[z(j)] = double(p);
    }
}

void moe_gather_forward(Vec& xs, const Vec& x, const Vec& sorted_to_copy, int64_t k, int64_t C) {
    for (size_t p = 0; p < sorted_to_copy.size(); ++p)
        for (int64_t c = 0; c < C; ++c) xs[p * z(C) + z(c)] = x[z(int64_t(sorted_to_copy[p]) / k * C + c)];
}

void moe_gather_backward(Vec& dx, const Vec& dxs, const Vec& copy_to_sorted, int64_t n, int64_t k, int64_t C,
                         bool accumulate) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double acc = accumulate ? dx[z(t * C + c)] : 0.0;
            for (int64_t s = 0; s < k; ++s) acc += dxs[z(int64_t(copy_to_sorted[z(t * k + s)]) * C + c)];
            dx[z(t * C + c)] = acc;
        }
}

void moe_matmul_forward(Vec& out, const Vec& inp, const Vec& w, const Vec& offsets, int64_t E, int64_t in,
                        int64_t outf) {
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = int64_t(offsets[z(e)]); r < int64_t(offsets[z(e + 1)]); ++r)
            for (int64_t o = 0; o < outf; ++o) {
                double acc = 0.0;
                for (int64_t i = 0; i < in; ++i) acc += inp[z(r * in + i)] * w[z((e * outf + o) * in + i)];
                out[z(r * outf + o)] = acc;
            }
}

void moe_matmul_backward(Vec* dinp, Vec* dw, const Vec& dout, const Vec& inp, const Vec& w, const Vec& offsets,
                         int64_t E, int64_t in, int64_t outf, bool accumulate) {
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = int64_t(offsets[z(e)]); r < int64_t(offsets[z(e + 1)]); ++r) {
            if (dinp)
                for (int64_t i = 0; i < in; ++i) {
                    double acc = 0.0;
                    for (int64_t o = 0; o < outf; ++o) acc += dout[z(r * outf + o)] * w[z((e * outf + o) * in + i)];
                    (*dinp)[z(r * in + i)] = accumulate ? (*dinp)[z(r * in + i)] + acc : acc;
                }
            if (dw)
                for (int64_t o = 0; o < outf; ++o)
                    for (int64_t i = 0; i < in; ++i)
                        (*dw)[z((e * outf + o) * in + i)] += dout[z(r * outf + o)] * inp[z(r * in + i)];
        }
}

void moe_combine_forward(Vec& out, const Vec& ys, const Vec& gates, const Vec& copy_to_sorted, int64_t n, int64_t k,
                         int64_t C) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double acc = 0.0;
            for (int64_t s = 0; s < k; ++s)
                acc += gates[z(t * k + s)] * ys[z(int64_t(copy_to_sorted[z(t * k + s)]) * C + c)];
            out[z(t * C + c)] = acc;
        }
}

void moe_combine_backward(Vec* dys, Vec* dgates, const Vec& dout, const Vec& ys, const Vec& gates,
                          const Vec& copy_to_sorted, int64_t n, int64_t k, int64_t C) {
    for (int64_t t = 0; t < n; ++t)
        for (int64_t s = 0; s < k; ++s) {
            const int64_t p = int64_t(copy_to_sorted[z(t * k + s)]);
            double d = 0.0;
            for (int64_t c = 0; c < C; ++c) {
                if (dys) (*dys)[z(p * C + c)] = gates[z(t * k + s)] * dout[z(t * C + c)];
                d += dout[z(t * C + c)] * ys[z(p * C + c)];
            }
            if (dgates) (*dgates)[z(t * k + s)] = d;
        }
}

namespace {
double row_lse(const Vec& x, int64_t off, int64_t V) {
    double mx = -INFINITY, s = 0.0;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, x[z(off + i)]);
    for (int64_t i = 0; i < V; ++i) s += std::exp(x[z(off + i)] - mx);
    return mx + std::log(s);
}
}  // namespace

void cross_entropy_forward(Vec& losses, const Vec& logits, const Vec& targets, int64_t n, int64_t V, int64_t Vp) {
    for (int64_t t = 0; t < n; ++t)
        losses[z(t)] = row_lse(logits, t * Vp, V) - logits[z(t * Vp + int64_t(targets[z(t)]))];
}

void cross_entropy_backward(Vec& dlogits, const Vec& logits, const Vec& targets, double dloss, int64_t n, int64_t V,
                            int64_t Vp) {
    for (int64_t t = 0; t < n; ++t) {
        const double lse = row_lse(logits, t * Vp, V);
        for (int64_t i = 0; i < Vp; ++i)
            dlogits[z(t * Vp + i)] =
                i < V ? dloss * (std::exp(logits[z(t * Vp + i)] - lse) - (i == int64_t(targets[z(t)]) ? 1.0 : 0.0)) /
                            double(n)
                      : 0.0;
    }
}

void lm_head_cross_entropy(double& mean_loss, Vec* losses, Vec* dx, Vec* dwte, const Vec& x, const Vec& wte,
                           const Vec& targets, double dloss, const ClassifierShape& s) {
    const int64_t n = s.n_tokens, C = s.d_model, V = s.vocab_size, Vp = s.padded_vocab_size;
    Vec logits(z(n * Vp)), dl(z(n * Vp)), l(z(n));
    matmul(logits, x, wte, MatmulShape{n, Vp, C, false, true, 1.0f, 0.0f});
    cross_entropy_forward(l, logits, targets, n, V, Vp);
    mean_loss = 0.0;
    for (int64_t t = 0; t < n; ++t) mean_loss += l[z(t)];
    mean_loss = n > 0 ? mean_loss / double(n) : 0.0;
    if (losses) *losses = l;
    if (!dx && !dwte) return;
    cross_entropy_backward(dl, logits, targets, dloss, n, V, Vp);
    if (dx) matmul(*dx, dl, wte, MatmulShape{n, C, Vp, false, false, 1.0f, 0.0f});
    if (dwte) matmul(*dwte, dl, x, MatmulShape{Vp, C, n, true, false, 1.0f, 1.0f});
}

}  // namespace skew::ops::ref
