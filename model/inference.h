// Inference on a trained model (docs/evaluation.md): per-token log-probabilities of a batch of
// variable-length sequences through the trainer's own forward (model_eval), and a KV cache for
// generation (prefill, then one token at a time with each block's K and V kept, GQA-aware).
// Everything runs through the Backend ops, so the CPU and CUDA backends behave alike. No router noise.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/arena.h"
#include "engine/memory_plan.h"
#include "model/activations.h"
#include "model/block.h"
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
/// model's; opened by runtime/session.h open_kv_cache). Its slots are the activation table's forward
/// lines (model/activations.h, kv_cache_buffers), so a decode step runs the training model's block
/// forward (model/block.h) over them: the keys and values of block b at position p are act.k[b] + p
/// * n_kv_heads * head_dim, act.v[b] likewise (bf16); the other slots are one set shared by the blocks.
struct KvCache {
    std::unique_ptr<MemoryPlan> plan;
    Arena arena;
    int64_t max_len = 0;  // positions it can hold
    int64_t length = 0;   // positions filled (the next token goes to position `length`)
    ActSlots act;         // kv_cache_slots_bind(model, max_len, arena)
    // a backend whose matmul widens bf16 weights (the CPU): the LM head and the dense layers' weights widened once
    // (exact), so a decode step does not widen them again per token; keyed by the bf16 pointer.
    WidenedWeights widened;
};

/// Keep fp32 copies of `m`'s LM head and non-expert linear weights in `kc` (kv_cache_forward uses
/// them): for a backend whose matmul widens bf16 weights at every call. Exact; 4 bytes per parameter.
void kv_cache_widen_weights(KvCache& kc, const Model& m);

/// Forward `tokens` (n >= 1, each in [0, padded_vocab_size)) at positions cache.length ..
/// cache.length + n - 1 against the cached keys and values, appending theirs; a prefill is the
/// first call with the whole prompt, a decode step a call with one token. Every block runs
/// block_forward (model/block.h) on the n new rows only: their q, k and v, then attention of the n
/// queries over the length + n cached positions (AttentionShape::kv_len), so a decode step costs
/// O(length) in attention and O(1) in the rest. Returns fp32 logits over the padded vocabulary:
/// (n, padded_vocab_size) when all_logits, else the last position's (padded_vocab_size), formed in
/// chunks of act.logits. Equals the uncached full forward's logits at the same positions (up to
/// bf16 rounding of a different GEMM row count).
/// Errors: the cache would overflow max_len, a token out of range (skew::Error).
std::vector<float> kv_cache_forward(Model& m, KvCache& cache, std::span<const int32_t> tokens, bool all_logits = false);

}  // namespace skew
