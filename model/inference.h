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
/// model's). Keys and values of block b at position p: k[b] + p * n_kv_heads * head_dim (bf16).
struct KvCache {
    std::unique_ptr<MemoryPlan> plan;
    Arena arena;
    int64_t max_len = 0;     // positions it can hold
    int64_t length = 0;      // positions filled (the next token goes to position `length`)
    std::vector<bf16*> k, v;  // per block: (max_len, n_kv_heads * head_dim) bf16
    // scratch of a forward over up to R = max_len new rows (positions index q, attn_out, lse)
    int32_t* tokens = nullptr;              // (R)
    bf16 *x = nullptr, *y = nullptr;        // (R, d_model) residual stream in / out of a block
    bf16 *ln_out = nullptr, *resid1 = nullptr;  // (R, d_model)
    bf16 *q = nullptr, *attn_out = nullptr;     // (max_len, n_heads * head_dim), by position
    float* lse = nullptr;                   // (n_heads, max_len)
    bf16 *ffn_h1 = nullptr, *ffn_h2 = nullptr, *ffn_act = nullptr;  // (R, d_ff)
    float *router_logits = nullptr, *router_probs = nullptr;        // (R, E)
    int32_t* topk_idx = nullptr;            // (R, k)
    float* topk_gate = nullptr;             // (R, k)
    int64_t *counts = nullptr, *offsets = nullptr;                  // (E), (E + 1)
    int64_t *sorted_to_copy = nullptr, *copy_to_sorted = nullptr;   // (R * k)
    bf16 *moe_in = nullptr, *moe_out = nullptr;                     // (R * k, d_model)
    bf16 *moe_h1 = nullptr, *moe_h2 = nullptr, *moe_act = nullptr;  // (R * k, d_expert)
    float* logits = nullptr;                // (R, padded_vocab_size) fp32
    float* scalars = nullptr;               // (8) fp32: the router's loss outputs (unused)
    // CPU backend only: the tied head and the dense layers' bf16 weights widened to fp32 once
    // (exact), so a decode step does not widen them again per token; keyed by the bf16 pointer.
    std::map<const void*, std::vector<float>> widened;
};

/// Allocate a cache for `m` holding up to max_len positions. On the CPU backend it also keeps
/// fp32 copies of the LM head and the non-expert linear weights (4 bytes per parameter; the
/// widening is exact, so results are unchanged; the weights must not change while the cache is
/// used). Errors: max_len outside [1, model.max_seq_len]
/// (skew::Error).
KvCache kv_cache_make(const Model& m, int64_t max_len);

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
