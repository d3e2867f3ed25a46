// The per-token router math shared by the CPU loop and the CUDA kernel (docs/design.md, "Router (fp32)"):
// noisy logits, a stable softmax, top-k by probability (distinct experts, ties to the lower index)
// and gates renormalized to sum to 1 (for top_k > 1; a top-1 gate is the probability itself).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/hd.h"
#include "kernels/common/philox.h"

namespace skew {

/// Whether the gates of the chosen experts are renormalized to sum to 1: when `normalize`
/// (model.normalize_top_k: Mixtral, Qwen3; not OLMoE) and top_k > 1. A top-1 gate renormalized
/// would be p / p = 1 and give the router no gradient from the LM loss, so for top_k = 1 the gate is
/// the router probability itself, as in the Switch Transformer (Fedus et al. 2021, Section 2.1:
/// y = p_i(x) E_i(x)).
SKEW_HD bool router_renormalizes_gates(int64_t K, bool normalize = true) { return normalize && K > 1; }

/// Route token t. logits (E) fp32 clean router logits of the token; probs (E) fp32 out:
/// softmax(logits + noise), noise_std * N(0, 1) drawn from Philox (key, step, tensor,
/// noise_offset + t*E + e) when noise_std != 0; expert_idx (K) int32 out: the K most probable
/// experts in descending order, distinct, ties to the lower index (k passes of a strict-greater
/// argmax); gates (K) fp32 out: their probabilities, renormalized to sum to 1 when
/// router_renormalizes_gates(K, normalize).
SKEW_HD void router_route_token(float* probs, int32_t* expert_idx, float* gates, const float* logits, int64_t E,
                                int64_t K, int64_t t, float noise_std, PhiloxKey key, uint32_t step, uint32_t tensor,
                                uint64_t noise_offset, bool normalize = true) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
        float x = logits[e];
        if (noise_std != 0.0f) x += noise_std * philox_normal(key, step, tensor, noise_offset + uint64_t(t * E + e));
        probs[e] = x;
        mx = fmaxf(mx, x);
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
        probs[e] = expf(probs[e] - mx);
        sum += probs[e];
    }
    const float inv = 1.0f / sum;
    for (int64_t e = 0; e < E; ++e) probs[e] *= inv;
    float psum = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        int32_t best = -1;
        for (int64_t e = 0; e < E; ++e) {
            bool taken = false;
            for (int64_t i = 0; i < j; ++i) taken |= expert_idx[i] == e;
            if (taken) continue;
            if (best < 0 || probs[e] > probs[best]) best = int32_t(e);
        }
        expert_idx[j] = best;
        gates[j] = probs[best];
        psum += probs[best];
    }
    if (router_renormalizes_gates(K, normalize))
        for (int64_t j = 0; j < K; ++j) gates[j] /= psum;
}

}  // namespace skew
