// Inference on a trained model (docs/evaluation.md): per-token log-probabilities of a batch of
// variable-length sequences through the trainer's own forward (model_eval), and a KV cache for
// generation (prefill, then one token at a time with each block's K and V kept, GQA-aware).
// Everything runs through the Backend ops, so the CPU and CUDA backends behave alike. No router noise.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/arena.h"
#include "engine/memory_plan.h"
#include "model/model.h"

namespace skew {

/// Log-probabilities of each sequence's tokens given the tokens before them:
/// out[s][i] = log p(seqs[s][i + 1] | seqs[s][0..i]) in nats, i in [0, len - 1), computed with
/// the trainer's forward (model_eval, router without noise) over the full vocabulary V (the
/// padded rows of the embedding table have probability 0, as in training). Sequences are packed
/// m.microbatch at a time, right-padded to m.seq_len (a causal model: padding cannot change the
/// scored positions; routing is capacity-free and per token). Each sequence needs 1 <= len <=
/// m.seq_len + 1 tokens, every one in [0, vocab_size); otherwise skew::Error naming the sequence.
std::vector<std::vector<float>> model_token_logprobs(Model& m, const std::vector<std::vector<int32_t>>& seqs);

/// A KV cache for one sequence of up to max_len positions (<= model.max_seq_len), with the
/// scratch of a forward over up to max_len new tokens, in its own arena (host or device like the
/// model's; opened by runtime/session.h open_kv_cache). Keys and values of block b at position p: k[b] + p * n_kv_heads * head_dim (bf16).
struct KvCache {
    std::unique_ptr<MemoryPlan> plan;
    Arena arena;
    int64_t max_len = 0;      // positions it can hold
    int64_t length = 0;       // positions filled (the next token goes to position `length`)
    std::vector<bf16*> k, v;  // per block: (max_len, n_kv_heads * head_dim) bf16
    // scratch of a forward over up to R = max_len new rows (positions index q, attn_out, lse)
    int32_t* tokens = nullptr;                  // (R)
    bf16 *x = nullptr, *y = nullptr;            // (R, d_model) residual stream in / out of a block
    bf16 *ln_out = nullptr, *resid1 = nullptr;  // (R, d_model)
    bf16 *q = nullptr, *attn_out = nullptr;     // (max_len, n_heads * head_dim), by position
    bf16* qk_pre = nullptr;  // (R, n_heads * head_dim): q's, then k's projection before its RMSNorm (model.qk_norm)
    float* lse = nullptr;    // (n_heads, max_len)
    bf16 *ffn_h1 = nullptr, *ffn_h2 = nullptr, *ffn_act = nullptr;           // (R, d_ff)
    float *router_logits = nullptr, *router_probs = nullptr;                 // (R, E)
    int32_t* topk_idx = nullptr;                                             // (R, k)
    float* topk_gate = nullptr;                                              // (R, k)
    int64_t *counts = nullptr, *offsets = nullptr;                           // (E), (E + 1)
    int64_t *sorted_to_copy = nullptr, *copy_to_sorted = nullptr;            // (R * k)
    bf16 *moe_in = nullptr, *moe_out = nullptr;                              // (R * k, d_model)
    bf16 *moe_h1 = nullptr, *moe_h2 = nullptr, *moe_act = nullptr;           // (R * k, d_expert)
    bf16 *shared_h1 = nullptr, *shared_h2 = nullptr, *shared_act = nullptr;  // (R, d_shared): shared experts
    bf16* shared_out = nullptr;                                              // (R, d_model): their ungated output
    float* gate_logit = nullptr;                                             // (R) fp32: x · w_gate
    float* logits = nullptr;                                                 // (R, padded_vocab_size) fp32
    float* scalars = nullptr;  // (8) fp32: the router's loss outputs (unused)
    // a backend whose matmul widens bf16 weights (the CPU): the tied head and the dense layers' weights widened once
    // (exact), so a decode step does not widen them again per token; keyed by the bf16 pointer.
    std::map<const void*, std::vector<float>> widened;
};

/// The rows of a KV cache of up to max_len positions (R = max_len), with their KvCache member:
/// X(member, C++ type, plan name, plan dtype, when, element count); when: ALL, DENSE (the model has a
/// dense FFN block), MOE (it has a MoE block), QK_NORM (model.qk_norm is full or per_head), SHARED
/// (its MoE blocks have shared experts), SHARED_GATE (gated ones). int64 index rows are pairs of
/// 4-byte words, as in the
/// activation table (model/activations.h). Each block's keys and values ("kv.k.<b>", "kv.v.<b>",
/// (R, kvd) bf16) sit between the two halves.
// clang-format off
#define SKEW_KV_CACHE_HEAD(X)                                                  \
    X(tokens,         int32_t*, "kv.tokens",         I32,  ALL,   D.R)         \
    X(x,              bf16*,    "kv.x",              BF16, ALL,   D.R * D.d)   \
    X(y,              bf16*,    "kv.y",              BF16, ALL,   D.R * D.d)   \
    X(ln_out,         bf16*,    "kv.ln_out",         BF16, ALL,   D.R * D.d)   \
    X(resid1,         bf16*,    "kv.resid1",         BF16, ALL,   D.R * D.d)   \
    X(q,              bf16*,    "kv.q",              BF16, ALL,   D.R * D.qd)  \
    X(attn_out,       bf16*,    "kv.attn_out",       BF16, ALL,   D.R * D.qd)  \
    X(qk_pre,         bf16*,    "kv.qk_pre",         BF16, QK_NORM, D.R * D.qd) \
    X(lse,            float*,   "kv.lse",            F32,  ALL,   D.H * D.R)   \
    X(logits,         float*,   "kv.logits",         F32,  ALL,   D.R * D.Vp)  \
    X(scalars,        float*,   "kv.scalars",        F32,  ALL,   8)
#define SKEW_KV_CACHE_BODY(X)                                                  \
    X(ffn_h1,         bf16*,    "kv.ffn_h1",         BF16, DENSE, D.R * D.ff)  \
    X(ffn_h2,         bf16*,    "kv.ffn_h2",         BF16, DENSE, D.R * D.ff)  \
    X(ffn_act,        bf16*,    "kv.ffn_act",        BF16, DENSE, D.R * D.ff)  \
    X(router_logits,  float*,   "kv.router_logits",  F32,  MOE,   D.R * D.E)   \
    X(router_probs,   float*,   "kv.router_probs",   F32,  MOE,   D.R * D.E)   \
    X(topk_idx,       int32_t*, "kv.topk_idx",       I32,  MOE,   D.R * D.K)   \
    X(topk_gate,      float*,   "kv.topk_gate",      F32,  MOE,   D.R * D.K)   \
    X(counts,         int64_t*, "kv.counts",         F32,  MOE,   2 * D.E)     \
    X(offsets,        int64_t*, "kv.offsets",        F32,  MOE,   2 * (D.E + 1)) \
    X(sorted_to_copy, int64_t*, "kv.sorted_to_copy", F32,  MOE,   2 * D.R * D.K) \
    X(copy_to_sorted, int64_t*, "kv.copy_to_sorted", F32,  MOE,   2 * D.R * D.K) \
    X(moe_in,         bf16*,    "kv.moe_in",         BF16, MOE,   D.R * D.K * D.d) \
    X(moe_out,        bf16*,    "kv.moe_out",        BF16, MOE,   D.R * D.K * D.d) \
    X(moe_h1,         bf16*,    "kv.moe_h1",         BF16, MOE,   D.R * D.K * D.de) \
    X(moe_h2,         bf16*,    "kv.moe_h2",         BF16, MOE,   D.R * D.K * D.de) \
    X(moe_act,        bf16*,    "kv.moe_act",        BF16, MOE,   D.R * D.K * D.de) \
    X(shared_h1,      bf16*,    "kv.shared_h1",      BF16, SHARED, D.R * D.ds) \
    X(shared_h2,      bf16*,    "kv.shared_h2",      BF16, SHARED, D.R * D.ds) \
    X(shared_act,     bf16*,    "kv.shared_act",     BF16, SHARED, D.R * D.ds) \
    X(shared_out,     bf16*,    "kv.shared_out",     BF16, SHARED_GATE, D.R * D.d) \
    X(gate_logit,     float*,   "kv.shared_gate_logit", F32, SHARED_GATE, D.R)
// clang-format on

/// The buffers of a KV cache of `c` for up to max_len positions (the rows above, all live together).
std::vector<BufferSpec> kv_cache_buffers(const ModelConfig& c, int64_t max_len);

/// Point every member of `kc` at its row in kc.arena (allocated from kv_cache_buffers(c,
/// kc.max_len)). Throws skew::Error naming a row the arena's plan lacks.
void kv_cache_bind(KvCache& kc, const ModelConfig& c);

/// Keep fp32 copies of `m`'s LM head and non-expert linear weights in `kc` (kv_cache_forward uses
/// them): for a backend whose matmul widens bf16 weights at every call. Exact; 4 bytes per parameter.
void kv_cache_widen_weights(KvCache& kc, const Model& m);

/// Forward `tokens` (n >= 1, each in [0, padded_vocab_size)) at positions cache.length ..
/// cache.length + n - 1 against the cached keys and values, appending theirs; a prefill is the
/// first call with the whole prompt, a decode step a call with one token. Returns fp32 logits
/// over the padded vocabulary: (n, padded_vocab_size) when all_logits, else the last position's
/// (padded_vocab_size). Equals the uncached full forward's logits at the same positions (up to
/// bf16 rounding of a different GEMM row count). Attention of the new rows runs as the causal
/// attention over positions 0 .. length + n - 1 (the cached rows' queries are ignored).
/// Errors: the cache would overflow max_len, a token out of range (skew::Error).
std::vector<float> kv_cache_forward(Model& m, KvCache& cache, std::span<const int32_t> tokens, bool all_logits = false);

}  // namespace skew
