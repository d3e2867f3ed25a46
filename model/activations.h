// The model's activation slots, declared once (llm.c's TENSOR_SPEC is the model): each line of
// SKEW_ACTIVATIONS gives the ActSlots member, its C++ type, the memory plan's buffer name and
// dtype, which models hold it, its lifetime and its shape. The memory plan reads the table
// (model_activation_buffers) and model_bind binds it (act_slots_bind), so the two cannot drift.
// Per-block activation checkpointing (paper Section 4; docs/design.md "The data path"): each
// block's input lives from the forward pass to its backward; one set of working slots serves
// every block in turn; the LM head works on token chunks so full-batch fp32 logits never exist.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "kernels/common/bf16.h"

namespace skew {

/// The sizes the activation shapes are written in, for one microbatch of B sequences of T tokens.
struct ActDims {
    int64_t B = 0, T = 0, N = 0;  // sequences, tokens per sequence, N = B*T tokens
    int64_t d = 0, qd = 0, kvd = 0, H = 0;  // d_model, n_heads*head_dim, n_kv_heads*head_dim, n_heads
    int64_t ff = 0, de = 0;        // d_ff, d_expert
    int64_t E = 0, k = 0, NK = 0;  // n_experts, top_k, N*top_k token copies
    int64_t logits = 0;            // fp32 words of act.logits (LM head chunk, or the backend's fused head)
    /// Expert parallelism (docs/distributed.md, "Expert parallel"): M ranks share each expert bank,
    /// El = E / M experts per rank; NKr = M * NK, the most token rows a rank's experts can receive
    /// per microbatch (every rank of the group routing every copy to this rank's experts). M = 1:
    /// El = E, NKr = NK and no exchange slots.
    int64_t M = 1, El = 0, NKr = 0;
};

/// The dimensions of `m` for `microbatch` sequences of `seq_len` tokens; act.logits holds
/// max(min(N, LOGITS_CHUNK_TOKENS) x padded_vocab_size, the backend's fused LM head workspace).
/// lm_head_workspace_bytes: that workspace (0: the backend has no fused head). expert_parallel: M
/// (table_expert_parallel of the rank's parameter table), which must divide n_experts.
ActDims act_dims(const ModelConfig& m, int64_t microbatch, int64_t seq_len, int64_t lm_head_workspace_bytes,
                 int64_t expert_parallel = 1);

/// M of a parameter table: n_experts over the experts its banks hold (build_param_table with an
/// ExpertShard), 1 for a model without MoE blocks.
int64_t table_expert_parallel(const ParamTable& table, const ModelConfig& m);

/// Which models hold a slot: every model, those with a dense block, those with an MoE block, or
/// one slot per block ("<name><block>"), or MoE models under expert parallelism (M > 1).
enum class ActWhen : uint8_t { ALL, DENSE, MOE, PER_BLOCK, EXPERT_PARALLEL };

/// Named words of ws.scalars (fp32, backend memory): the ops' scalar outputs.
enum ActScalar : int {
    ACT_SCALAR_LM_LOSS = 0,       // mean cross-entropy of the microbatch (lm_head)
    ACT_SCALAR_BALANCE_LOSS = 2,  // balance loss of the MoE block being run
    ACT_SCALAR_Z_LOSS = 3,        // z-loss of the MoE block being run
    ACT_SCALAR_EP_SQ_NORM = 4,    // words 4-5: one fp64, the expert banks' squared gradient norm summed over the expert-parallel group
};
constexpr int64_t ACT_SCALAR_WORDS = 64;  // words reserved (the plan's ws.scalars)

// clang-format off
// X(member, C++ type, plan name, plan dtype, when, plan kind, first, last, shape...)
// Phases (engine/memory_plan.h): F forward, H head, BW backward (recompute + backward), O optimizer.
// int64 index buffers are declared to the plan as pairs of int32 words (the plan has no int64 dtype).
#define SKEW_ACTIVATIONS(X) \
    /* the batch, the checkpointed block inputs, the final hidden state */                                    \
    X(tokens,          int32_t*,           "act.tokens",             I32,  ALL,       ACTIVATION, F,  BW, D.B, D.T)  \
    X(targets,         int32_t*,           "act.targets",            I32,  ALL,       ACTIVATION, F,  BW, D.B, D.T)  \
    X(block_input,     std::vector<bf16*>, "act.block_input.",       BF16, PER_BLOCK, ACTIVATION, F,  BW, D.N, D.d)  \
    X(final_input,     bf16*,              "act.final_input",        BF16, ALL,       ACTIVATION, F,  H,  D.N, D.d)  \
    /* working slots of one block (forward and recompute) */                                                   \
    X(ln1_out,         bf16*,              "act.ln1_out",            BF16, ALL,       ACTIVATION, F,  BW, D.N, D.d)  \
    X(ln1_mean,        float*,             "act.ln1_mean",           F32,  ALL,       ACTIVATION, F,  BW, D.N)       \
    X(ln1_rstd,        float*,             "act.ln1_rstd",           F32,  ALL,       ACTIVATION, F,  BW, D.N)       \
    X(q,               bf16*,              "act.q",                  BF16, ALL,       ACTIVATION, F,  BW, D.N, D.qd) \
    X(k,               bf16*,              "act.k",                  BF16, ALL,       ACTIVATION, F,  BW, D.N, D.kvd) \
    X(v,               bf16*,              "act.v",                  BF16, ALL,       ACTIVATION, F,  BW, D.N, D.kvd) \
    X(attn_lse,        float*,             "act.attn_lse",           F32,  ALL,       ACTIVATION, F,  BW, D.B, D.H, D.T) \
    X(attn_out,        bf16*,              "act.attn_out",           BF16, ALL,       ACTIVATION, F,  BW, D.N, D.qd) \
    X(resid1,          bf16*,              "act.resid1",             BF16, ALL,       ACTIVATION, F,  BW, D.N, D.d)  \
    X(ln2_out,         bf16*,              "act.ln2_out",            BF16, ALL,       ACTIVATION, F,  BW, D.N, D.d)  \
    X(ln2_mean,        float*,             "act.ln2_mean",           F32,  ALL,       ACTIVATION, F,  BW, D.N)       \
    X(ln2_rstd,        float*,             "act.ln2_rstd",           F32,  ALL,       ACTIVATION, F,  BW, D.N)       \
    X(ffn_h1,          bf16*,              "act.ffn_h1",             BF16, DENSE,     ACTIVATION, F,  BW, D.N, D.ff) \
    X(ffn_h2,          bf16*,              "act.ffn_h2",             BF16, DENSE,     ACTIVATION, F,  BW, D.N, D.ff) \
    X(ffn_act,         bf16*,              "act.ffn_act",            BF16, DENSE,     ACTIVATION, F,  BW, D.N, D.ff) \
    /* routing of one MoE block */                                                                             \
    X(router_logits,   float*,             "act.router_logits",      F32,  MOE,       ACTIVATION, F,  BW, D.N, D.E)  \
    X(router_probs,    float*,             "act.router_probs",       F32,  MOE,       ACTIVATION, F,  BW, D.N, D.E)  \
    X(topk_idx,        int32_t*,           "act.topk_idx",           I32,  MOE,       ACTIVATION, F,  BW, D.N, D.k)  \
    X(topk_gate,       float*,             "act.topk_gate",          F32,  MOE,       ACTIVATION, F,  BW, D.N, D.k)  \
    X(router_counts,   int64_t*,           "act.router_counts",      I32,  MOE,       ACTIVATION, F,  BW, D.E, 2)    \
    X(expert_offsets,  int64_t*,           "act.expert_offsets",     I32,  MOE,       ACTIVATION, F,  BW, D.E + 1, 2) \
    X(sorted_to_copy,  int64_t*,           "act.moe_sorted_to_copy", I32,  MOE,       ACTIVATION, F,  BW, D.NK, 2)   \
    X(copy_to_sorted,  int64_t*,           "act.moe_copy_to_sorted", I32,  MOE,       ACTIVATION, F,  BW, D.NK, 2)   \
    X(moe_in,          bf16*,              "act.moe_in",             BF16, MOE,       ACTIVATION, F,  BW, D.NK, D.d) \
    X(moe_h1,          bf16*,              "act.moe_h1",             BF16, MOE,       ACTIVATION, F,  BW, D.NKr, D.de) \
    X(moe_h2,          bf16*,              "act.moe_h2",             BF16, MOE,       ACTIVATION, F,  BW, D.NKr, D.de) \
    X(moe_act,         bf16*,              "act.moe_act",            BF16, MOE,       ACTIVATION, F,  BW, D.NKr, D.de) \
    X(moe_out,         bf16*,              "act.moe_out",            BF16, MOE,       ACTIVATION, F,  BW, D.NK, D.d) \
    /* expert parallel: the all-to-all receive (and return-send) rows, source-rank order; the rows of  */     \
    /* this rank's experts in expert order (input; output, then in the backward the output and input   */     \
    /* gradients); the permutation between the two orders both ways; local expert offsets; counts     */     \
    X(ep_recv,         bf16*,              "act.ep_recv",            BF16, EXPERT_PARALLEL, ACTIVATION, F, BW, D.NKr, D.d) \
    X(ep_moe_in,       bf16*,              "act.ep_moe_in",          BF16, EXPERT_PARALLEL, ACTIVATION, F, BW, D.NKr, D.d) \
    X(ep_moe_out,      bf16*,              "act.ep_moe_out",         BF16, EXPERT_PARALLEL, ACTIVATION, F, BW, D.NKr, D.d) \
    X(ep_perm,         int64_t*,           "act.ep_perm",            I32,  EXPERT_PARALLEL, ACTIVATION, F, BW, D.NKr, 2)  \
    X(ep_perm_inv,     int64_t*,           "act.ep_perm_inv",        I32,  EXPERT_PARALLEL, ACTIVATION, F, BW, D.NKr, 2)  \
    X(ep_offsets,      int64_t*,           "act.ep_offsets",         I32,  EXPERT_PARALLEL, ACTIVATION, F, BW, D.El + 1, 2) \
    X(ep_counts,       int64_t*,           "act.ep_counts",          I32,  EXPERT_PARALLEL, ACTIVATION, F, BW, 2 * D.E, 2) \
    /* LM head: final LayerNorm, logits (overwritten in place by their gradient), per-token losses */          \
    X(final_ln_out,    bf16*,              "act.final_ln_out",       BF16, ALL,       ACTIVATION, H,  H,  D.N, D.d)  \
    X(final_ln_mean,   float*,             "act.final_ln_mean",      F32,  ALL,       ACTIVATION, H,  H,  D.N)       \
    X(final_ln_rstd,   float*,             "act.final_ln_rstd",      F32,  ALL,       ACTIVATION, H,  H,  D.N)       \
    X(logits,          float*,             "act.logits",             F32,  ALL,       ACTIVATION, H,  H,  D.logits)  \
    X(losses,          float*,             "act.losses",             F32,  ALL,       ACTIVATION, H,  H,  D.N)       \
    X(d_final_ln_out,  bf16*,              "act.d_final_ln_out",     BF16, ALL,       ACTIVATION, H,  H,  D.N, D.d)  \
    /* backward: the fp32 residual-stream gradient and the gradients of one block's slots (projection  */     \
    /* and FFN outputs go straight into the next block's input, so they need no slots of their own)    */     \
    X(d_stream,        float*,             "act.d_stream",           F32,  ALL,       ACTIVATION, H,  BW, D.N, D.d)  \
    X(d_resid,         bf16*,              "act.d_resid",            BF16, ALL,       ACTIVATION, H,  BW, D.N, D.d)  \
    X(d_ln_out,        bf16*,              "act.d_ln_out",           BF16, ALL,       ACTIVATION, BW, BW, D.N, D.d)  \
    X(d_q,             bf16*,              "act.d_q",                BF16, ALL,       ACTIVATION, BW, BW, D.N, D.qd) \
    X(d_k,             bf16*,              "act.d_k",                BF16, ALL,       ACTIVATION, BW, BW, D.N, D.kvd) \
    X(d_v,             bf16*,              "act.d_v",                BF16, ALL,       ACTIVATION, BW, BW, D.N, D.kvd) \
    X(d_attn_out,      bf16*,              "act.d_attn_out",         BF16, ALL,       ACTIVATION, BW, BW, D.N, D.qd) \
    X(d_ffn_h1,        bf16*,              "act.d_ffn_h1",           BF16, DENSE,     ACTIVATION, BW, BW, D.N, D.ff) \
    X(d_ffn_h2,        bf16*,              "act.d_ffn_h2",           BF16, DENSE,     ACTIVATION, BW, BW, D.N, D.ff) \
    X(d_ffn_act,       bf16*,              "act.d_ffn_act",          BF16, DENSE,     ACTIVATION, BW, BW, D.N, D.ff) \
    X(d_router_logits, float*,             "act.d_router_logits",    F32,  MOE,       ACTIVATION, BW, BW, D.N, D.E)  \
    X(d_topk_gate,     float*,             "act.d_topk_gate",        F32,  MOE,       ACTIVATION, BW, BW, D.N, D.k)  \
    X(d_moe_out,       bf16*,              "act.d_moe_out",          BF16, MOE,       ACTIVATION, BW, BW, D.NK, D.d) \
    X(d_moe_h1,        bf16*,              "act.d_moe_h1",           BF16, MOE,       ACTIVATION, BW, BW, D.NKr, D.de) \
    X(d_moe_h2,        bf16*,              "act.d_moe_h2",           BF16, MOE,       ACTIVATION, BW, BW, D.NKr, D.de) \
    X(d_moe_act,       bf16*,              "act.d_moe_act",          BF16, MOE,       ACTIVATION, BW, BW, D.NKr, D.de) \
    X(d_moe_in,        bf16*,              "act.d_moe_in",           BF16, MOE,       ACTIVATION, BW, BW, D.NK, D.d) \
    /* the ops' scalar outputs for the whole step (named slots: ActScalar) */                                \
    X(scalars,         float*,             "ws.scalars",             F32,  ALL,       WORKSPACE,  F,  O,  ACT_SCALAR_WORDS)
// clang-format on

/// The activation slots of one microbatch, bound to the arena (one member per SKEW_ACTIVATIONS line).
struct ActSlots {
#define SKEW_ACT_MEMBER(member, type, ...) type member{};
    SKEW_ACTIVATIONS(SKEW_ACT_MEMBER)
#undef SKEW_ACT_MEMBER
    int64_t logits_bytes = 0;  // bytes of act.logits
    bool fused_head = false;   // the backend's fused LM head fits act.logits

    float* scalar(ActScalar s) const { return scalars + int(s); }
};

/// The table's buffers for one microbatch of `cfg.model` (in table order; block inputs per block),
/// with the dimensions of act_dims. Plan component "activations" (ws.scalars: "workspace").
std::vector<BufferSpec> model_activation_buffers(const Config& cfg, const ActDims& D);

/// The buffers of deferred expert weight gradients (train.expert_grads: deferred; docs/design.md
/// "Deferred expert gradients"), which replace the expert banks' "grad.<param>" buffers: per MoE
/// block b and microbatch m of the step's `accum_steps`, the operands of the weight-gradient
/// products dW = dY^T X of the three expert banks, kept from the backward to the optimizer step
/// (kind GRAD, FORWARD..OPTIMIZER, component "kept expert operands"):
///   kept.<b>.<m>.moe_in (NK, d) bf16      X of w1 and w2 (the gathered LN2 rows, expert order)
///   kept.<b>.<m>.moe_act (NK, de) bf16    X of w3 (the SwiGLU output)
///   kept.<b>.<m>.d_moe_h1, d_moe_h2 (NK, de) bf16   dY of w1, w2
///   kept.<b>.<m>.d_moe_out (NK, d) bf16   dY of w3
/// (each expert's row range is kept on the host, Model::deferred) and one expert matrix of scratch "ws.expert_grad" (d_expert x d_model, `grad_dtype`, OPTIMIZER
/// phase) into which the optimizer step forms one expert's dW at a time. Empty when the model has
/// no MoE block.
std::vector<BufferSpec> deferred_expert_buffers(const Config& cfg, const ActDims& D, int64_t accum_steps,
                                                DType grad_dtype);

/// "kept.<block>.<microbatch>.": the name prefix of deferred_expert_buffers.
std::string deferred_expert_prefix(int64_t block, int64_t microbatch);

/// True for the parameters whose gradient deferred mode does not store (the expert banks).
bool deferred_expert_param(const ParamInfo& p);

/// Bind every slot of the table that `cfg.model` holds to the arena's buffer of the same name.
/// Throws skew::Error naming the slot when the plan lacks it or holds fewer bytes than the table says.
ActSlots act_slots_bind(const Config& cfg, const ActDims& D, const Arena& arena);

}  // namespace skew
