// CUDA MoE router (docs/design.md, "Router (fp32)"; Switch balance loss α·E·Σ p̄_i f_i, z-loss
// coef·mean(lse²)). One thread per token for softmax/top-k and the backward (E is small); one block
// per expert for p̄; one block for the two losses. CPU twin: kernels/cpu/moe_router.cpp.
#include "kernels/common/moe_router_math.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_router.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 128;

__device__ float logits_row_lse(const float* __restrict__ x, int64_t E) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = fmaxf(mx, x[e]);
    float s = 0.0f;
    for (int64_t e = 0; e < E; ++e) s += expf(x[e] - mx);
    return mx + logf(s);
}

__global__ void router_softmax_topk_kernel(float* __restrict__ probs, int32_t* __restrict__ expert_idx,
                                           float* __restrict__ gates, unsigned long long* __restrict__ counts,
                                           double* __restrict__ z_tok, const float* __restrict__ logits, int64_t n,
                                           int64_t E, int64_t K, RouterOptions o) {
    for (int64_t t = thread_index(); t < n; t += grid_stride()) {
        const PhiloxKey key{o.seed, PHILOX_STREAM_ROUTER_NOISE};
        const float* lg = logits + t * E;
        float* p = probs + t * E;
        const double lse = double(logits_row_lse(lg, E));
        z_tok[t] = lse * lse;
        int32_t* idx = expert_idx + t * K;
        router_route_token(p, idx, gates + t * K, lg, E, K, t, o.noise_std, key, o.step, o.tensor, o.noise_offset,
                           o.normalize_top_k);
        for (int64_t j = 0; j < K; ++j) atomicAdd(counts + idx[j], 1ull);  // integer: order-independent
    }
}

// Block per expert: p̄_e = mean over tokens of probs[:, e] (double, fixed tree).
__global__ void router_mean_probs_kernel(double* __restrict__ pbar, const float* __restrict__ probs, int64_t n,
                                         int64_t E) {
    __shared__ double smem[32];
    const int64_t e = blockIdx.x;
    double acc = 0.0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) acc += double(probs[t * E + e]);
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) pbar[e] = n > 0 ? acc / double(n) : 0.0;
}

__global__ void router_losses_kernel(float* __restrict__ balance_loss, float* __restrict__ z_loss,
                                     int64_t* __restrict__ counts_out, float* __restrict__ mean_probs,
                                     const unsigned long long* __restrict__ counts, const double* __restrict__ pbar,
                                     const double* __restrict__ z_tok, int64_t n, int64_t E, int64_t K,
                                     float balance_alpha, float z_coef) {
    __shared__ double smem[32];
    double bal = 0.0;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        const double f = n > 0 ? double(counts[e]) / double(n * K) : 0.0;
        bal += pbar[e] * f;
        if (counts_out) counts_out[e] = int64_t(counts[e]);
        if (mean_probs) mean_probs[e] = float(pbar[e]);
    }
    bal = block_sum(bal, smem);
    double z = 0.0;
    for (int64_t t = threadIdx.x; t < n; t += blockDim.x) z += z_tok[t];
    z = block_sum(z, smem);
    if (threadIdx.x == 0) {
        if (balance_loss) *balance_loss = float(double(balance_alpha) * double(E) * bal);
        if (z_loss) *z_loss = n > 0 ? float(double(z_coef) * z / double(n)) : 0.0f;
    }
}

__global__ void router_backward_kernel(float* __restrict__ dlogits, const float* __restrict__ dgates,
                                       const float* __restrict__ logits, const float* __restrict__ probs,
                                       const int32_t* __restrict__ expert_idx, const float* __restrict__ gates,
                                       const int64_t* __restrict__ counts, double bal_coef, double zs, int64_t n,
                                       int64_t E, int64_t K, bool normalize) {
    for (int64_t t = thread_index(); t < n; t += grid_stride()) {
        const float* p = probs + t * E;
        const int32_t* idx = expert_idx + t * K;
        const float* g = gates + t * K;
        const float* dg = dgates ? dgates + t * K : nullptr;
        // Gate renormalization: dp[idx_j] += (dg_j - Σ_i dg_i g_i) / P; top-1 (g = p): dp[idx_0] += dg_0.
        float P = 0.0f, dot = 0.0f;
        if (dg) {
            for (int64_t j = 0; j < K; ++j) {
                P += p[idx[j]];
                dot += dg[j] * g[j];
            }
            if (!router_renormalizes_gates(K, normalize)) P = 1.0f, dot = 0.0f;
        }
        auto dp_of = [&](int64_t e) {
            float v = float(bal_coef * double(counts[e]));
            if (dg)
                for (int64_t j = 0; j < K; ++j)
                    if (idx[j] == e) v += (dg[j] - dot) / P;
            return v;
        };
        float pdp = 0.0f;
        for (int64_t e = 0; e < E; ++e) pdp += p[e] * dp_of(e);
        const float* lg = logits + t * E;
        const float lse = logits_row_lse(lg, E);
        float* dl = dlogits + t * E;
        for (int64_t e = 0; e < E; ++e) {
            const float q = expf(lg[e] - lse);
            dl[e] = p[e] * (dp_of(e) - pdp) + float(zs * double(lse) * double(q));
        }
    }
}

void check_shape(const char* op, const RouterShape& s) {
    check_nonneg(op, s.n_tokens);
    if (s.n_experts <= 0) throw_op_error(op, "n_experts must be positive");
    if (s.top_k < 1 || s.top_k > s.n_experts) throw_op_error(op, "top_k must be in [1, n_experts]");
}

using cuda_ws::align16;

}  // namespace

// ---- launchers

int64_t moe_router_forward_scratch_bytes(const RouterShape& s) {
    return cuda_ws::moe_router_forward_scratch_bytes(s.n_tokens, s.n_experts);
}

void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                        float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                        const RouterOptions& o, void* scratch, cudaStream_t stream) {
    check_shape("moe_router_forward", s);
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    char* base = static_cast<char*>(scratch);
    auto* cnt = reinterpret_cast<unsigned long long*>(base);
    auto* pbar = reinterpret_cast<double*>(base + align16(E * 8));
    auto* z_tok = reinterpret_cast<double*>(base + 2 * align16(E * 8));
    cuda_check(cudaMemsetAsync(cnt, 0, size_t(E * 8), stream));
    if (n > 0) {
        router_softmax_topk_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(probs, expert_idx, gates, cnt, z_tok,
                                                                                   logits, n, E, K, o);
        cuda_check_kernel("router_softmax_topk_kernel");
    }
    router_mean_probs_kernel<<<unsigned(E), 256, 0, stream>>>(pbar, probs, n, E);
    cuda_check_kernel("router_mean_probs_kernel");
    router_losses_kernel<<<1, 1024, 0, stream>>>(balance_loss, z_loss, counts, mean_probs, cnt, pbar, z_tok, n, E, K,
                                                 o.balance_alpha, o.z_coef);
    cuda_check_kernel("router_losses_kernel");
}

void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                         const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                         float d_z, const RouterShape& s, const RouterOptions& o, cudaStream_t stream) {
    check_shape("moe_router_backward", s);
    const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
    if (n == 0) return;
    // d balance / d p[t, e] = d_balance·α·E·counts_e / (n·K) / n; d z / d logit = d_z·coef·2·lse·q / n.
    const double bal_coef = double(d_balance) * double(o.balance_alpha) * double(E) / double(n * K) / double(n);
    const double zs = double(d_z) * double(o.z_coef) * 2.0 / double(n);
    router_backward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        dlogits, dgates, logits, probs, expert_idx, gates, counts, bal_coef, zs, n, E, K, o.normalize_top_k);
    cuda_check_kernel("router_backward_kernel");
}

}  // namespace skew::cuda
