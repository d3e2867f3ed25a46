// CPU MoE router in fp32 (docs/design.md, "Router (fp32)"): Philox noise N(0, sigma^2) on the logits in
// training, softmax, top-k by probability (distinct, ties to the lower index), renormalized gates,
// the Switch balance loss α·E·Σ p̄_i f_i (f without gradient) and the z-loss coef·mean(lse^2).
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/common/moe_router_math.h"
#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

void check_shape(const char* op, const RouterShape& s) {
    check_nonneg(op, s.n_tokens);
    if (s.n_experts <= 0) fail("{}: n_experts must be positive, got {}", op, s.n_experts);
    if (s.top_k < 1 || s.top_k > s.n_experts)
        fail("{}: top_k {} must be in [1, n_experts = {}]", op, s.top_k, s.n_experts);
}

// logsumexp of one row (stable: max subtracted), in double.
double row_lse(const float* x, int64_t n) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
    return double(mx) + std::log(sum);
}

}  // namespace

void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                        float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                        const RouterOptions& o) {
    check_shape("moe_router_forward", s);
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    const PhiloxKey key{o.seed, PHILOX_STREAM_ROUTER_NOISE};
    std::vector<double> z_tok(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n * E > kParallelMinWork)
    for (int64_t t = 0; t < n; ++t) {
        const float* lg = logits + t * E;
        float* p = probs + t * E;
        z_tok[size_t(t)] = std::pow(row_lse(lg, E), 2.0);
        router_route_token(p, expert_idx + t * K, gates + t * K, lg, E, K, t, o.noise_std, key, o.step, o.tensor,
                           o.noise_offset, o.normalize_top_k);
    }

    std::vector<int64_t> cnt(size_t(E), 0);
    for (int64_t i = 0; i < n * K; ++i) ++cnt[size_t(expert_idx[i])];
    std::vector<double> pbar(size_t(E), 0.0);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < E; ++e) pbar[size_t(e)] += probs[t * E + e];
    double balance = 0.0, z = 0.0;
    for (int64_t e = 0; e < E; ++e) {
        pbar[size_t(e)] = n > 0 ? pbar[size_t(e)] / double(n) : 0.0;
        const double f = n > 0 ? double(cnt[size_t(e)]) / double(n * K) : 0.0;
        balance += pbar[size_t(e)] * f;
        if (counts) counts[e] = cnt[size_t(e)];
        if (mean_probs) mean_probs[e] = float(pbar[size_t(e)]);
    }
    for (int64_t t = 0; t < n; ++t) z += z_tok[size_t(t)];
    if (balance_loss) *balance_loss = float(double(o.balance_alpha) * double(E) * balance);
    if (z_loss) *z_loss = n > 0 ? float(double(o.z_coef) * z / double(n)) : 0.0f;
}

void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                         const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                         float d_z, const RouterShape& s, const RouterOptions& o) {
    check_shape("moe_router_backward", s);
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    if (n == 0) return;
    // d balance / d p[t, e] = α·E·f_e / n (f constant); d z / d logit[t, e] = coef·2·lse_t·q[t, e] / n.
    std::vector<float> dbal(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
        dbal[size_t(e)] =
            float(double(d_balance) * o.balance_alpha * double(E) * (double(counts[e]) / double(n * K)) / double(n));
    const double zs = double(d_z) * o.z_coef * 2.0 / double(n);
#pragma omp parallel if (n * E > kParallelMinWork)
    {
        std::vector<float> dp(static_cast<size_t>(E));
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n; ++t) {
            const float* p = probs + t * E;
            const int32_t* idx = expert_idx + t * K;
            const float* g = gates + t * K;
            for (int64_t e = 0; e < E; ++e) dp[size_t(e)] = dbal[size_t(e)];
            if (dgates) {
                // g_i = p_i / P over the chosen set: dp_j = (dg_j - Σ_i dg_i g_i) / P; top-1 or
                // normalize_top_k off (no renormalization, g = p): dp_j = dg_j, i.e. P = 1, no dot term.
                const float* dg = dgates + t * K;
                float P = 0.0f, dot = 0.0f;
                for (int64_t j = 0; j < K; ++j) {
                    P += p[idx[j]];
                    dot += dg[j] * g[j];
                }
                if (!router_renormalizes_gates(K, o.normalize_top_k)) P = 1.0f, dot = 0.0f;
                for (int64_t j = 0; j < K; ++j) dp[size_t(idx[j])] += (dg[j] - dot) / P;
            }
            // softmax backward: dx_e = p_e (dp_e - Σ p·dp); noise is additive, so dx = dlogits.
            float pdp = 0.0f;
            for (int64_t e = 0; e < E; ++e) pdp += p[e] * dp[size_t(e)];
            const float* lg = logits + t * E;
            float* dl = dlogits + t * E;
            const double lse = row_lse(lg, E);
            for (int64_t e = 0; e < E; ++e) {
                const double q = std::exp(double(lg[e]) - lse);
                dl[e] = p[e] * (dp[size_t(e)] - pdp) + float(zs * lse * q);
            }
        }
    }
}

}  // namespace skew::cpu
