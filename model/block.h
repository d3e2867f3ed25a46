// One transformer block's forward (docs/design.md "The data path"; docs/architectures.md), written
// once over a view of its buffers: the training model fills the view from block b's activation
// slots (model/model.cpp), the KV-cache decoder from its cache's slots (model/inference.cpp), so
// an architecture option lands in one place. Also the parts of a MoE block the backward shares.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "kernels/backend.h"
#include "model/activations.h"
#include "model/model.h"

namespace skew {

/// The sizes of `batch` sequences of `seq_len` token rows of a model: B, T, N = B*T; d_model,
/// head_dim, n_heads*head_dim, n_kv_heads*head_dim, n_heads, n_kv_heads; d_ff; n_experts, top_k,
/// N*top_k copies, d_expert, the shared experts' width; vocab_size, padded_vocab_size.
struct Dims {
    int64_t B, T, N, d, hd, qd, kvd, H, KV, ff, E, k, NK, de, ds, V, Vp;
};
Dims dims_of(const ModelConfig& c, int64_t batch, int64_t seq_len);

/// fp32 copies of bf16 linear weights, keyed by the bf16 weight's pointer (KvCache::widened).
using WidenedWeights = std::map<const void*, std::vector<float>>;

/// A linear layer's weight operand: its fp32 copy in `widened` when there is one (non-null), else
/// the parameter's own weight.
ConstTensorRef linear_weight(const WidenedWeights* widened, const ParamRef& p);

/// Where a MoE block's expert products read and write (N*k rows in expert order): the table's
/// act.moe_* slots in stored mode, the block's kept operands of the microbatch in deferred mode
/// (model/activations.h, deferred_expert_buffers), where h1 and h2 share bytes with their
/// gradients d_h1 and d_h2 (the SwiGLU backward runs in place).
struct ExpertSlots {
    bf16 *moe_in, *h1, *h2, *act, *d_out, *d_h1, *d_h2;
};

/// The stored-mode expert slots of block `b` of `a`.
ExpertSlots stored_expert_slots(const ActSlots& a, size_t b);

/// The buffers of one block's forward and the rows it runs: `rows` new token rows of each of
/// `batch` sequences at positions pos0 .. pos0 + rows - 1, attending over positions 0 .. pos0 +
/// rows - 1. Training: a microbatch (pos0 0, rows seq_len); decoding: a step's new tokens after
/// pos0 cached ones (batch 1). The block's working slots are act->*[block] (N = batch * rows rows
/// used); its keys and values act->k[block], act->v[block] hold every position's rows, (batch,
/// pos0 + rows, n_kv_heads * head_dim) bf16, and the forward writes the new rows' at row pos0.
struct BlockView {
    const ActSlots* act = nullptr;
    int64_t block = 0;
    int64_t batch = 1, rows = 0, pos0 = 0;
    const bf16* input = nullptr;  // (N, d_model) the block's input
    bf16* out = nullptr;          // (N, d_model) its output; null: stop after the last slot the backward reads
    ExpertSlots experts{};        // MoE blocks
    const WidenedWeights* widened = nullptr;  // fp32 copies the linear layers read instead of bf16 weights
    int64_t microbatch = 0;                   // the router noise's microbatch and step (RouterOptions)
    uint32_t step = 0;
    bool noise = false;
};

/// Router options of MoE block `blk` for `n_tokens` rows of microbatch `mb` at `step` (noise only
/// when `noise`; the offset keys token t of microbatch mb at (mb * n_tokens + t) * n_experts).
RouterOptions router_options(const Model& m, const BlockParams& blk, int64_t mb, uint32_t step, bool noise,
                             int64_t n_tokens);

/// Where the grouped expert products of MoE block `b` run: over the N*k copies and all E experts
/// (one rank: moe_in, a.moe_out[b], a.expert_offsets[b]), or over the rows this rank's experts
/// received (expert parallel: act.ep_moe_in, ep_moe_out, ep_offsets of m.act).
struct ExpertRows {
    const bf16* in;          // X of w1 and w2 (rows, d), expert order
    bf16* out;               // w3's output (rows, d); in the backward w3's dY, then dX of w1 + w2
    const int64_t* offsets;  // (n_experts + 1) row offsets
    int64_t n_experts, rows;
};
ExpertRows expert_rows(const Model& m, const ActSlots& a, size_t b, const bf16* moe_in, int64_t n_tokens);

/// The attention core of the view's block: act->attn_out, attn_lse from its q (the new rows) and
/// every position's k, v (causal, GQA; Backend::attention_forward with kv_len = pos0 + rows).
void block_attention_forward(Model& m, const BlockView& v);

/// Block v.block of `m` forward from v.input: norm, q/k/v (biases, QK-norm, positions), attention,
/// output projection and residual; norm, then the dense SwiGLU FFN or the router, dispatch, expert
/// SwiGLUs and combine (expert parallel: the exchange of m.ep), the shared experts; the residual
/// into v.out. Fills *stats for a MoE block when non-null. The same ops on the same rows whoever
/// fills the view, so training's forward and its recompute agree bit for bit.
void block_forward(Model& m, const BlockView& v, MoeStats* stats);

}  // namespace skew
