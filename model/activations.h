// The model's activation slots, declared once (llm.c's TENSOR_SPEC is the model): each line of
// SKEW_ACTIVATIONS gives the ActSlots member, its C++ type, the memory plan's buffer name and
// dtype, which blocks hold it, how many copies it has under each train.recompute mode, its
// lifetime and its shape. The memory plan reads the table (model_activation_buffers) and
// model_bind binds it (act_slots_bind), so the two cannot drift.
// Activation recompute (paper Section 4; docs/design.md "Activation recompute"): under
// `train.recompute: block` (the default) each block's input lives from the forward pass to its
// backward and one set of working slots serves every block in turn (the backward recomputes the
// block); under `attention` every block keeps its working slots except the attention output and
// logsumexp, which one shared pair holds (the backward recomputes them from the kept q, k, v);
// under `none` every block keeps all of them. The LM head works on token chunks so full-batch fp32
// logits never exist. A KV cache (model/inference.h) holds the forward's lines of the same table,
// one copy of each, with the keys and values per block (kv_cache_buffers).
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "kernels/common/bf16.h"

namespace skew {

/// The sizes the activation shapes are written in, for one microbatch of B sequences of T tokens.
struct ActDims {
    int64_t B = 0, T = 0, N = 0;            // sequences, tokens per sequence, N = B*T tokens
    int64_t d = 0, qd = 0, kvd = 0, H = 0;  // d_model, n_heads*head_dim, n_kv_heads*head_dim, n_heads
    int64_t ff = 0, de = 0;                 // d_ff, d_expert
    int64_t ds = 0;                         // the shared experts' hidden width (ModelConfig::d_shared), 0 without
    int64_t E = 0, k = 0, NK = 0;           // n_experts, top_k, N*top_k token copies
    int64_t logits = 0;                     // fp32 words of act.logits (LM head chunk, or the backend's fused head)
    /// Rows of q's and k's RMSNorm (model.qk_norm): N (full), N * n_heads and N * n_kv_heads (per_head).
    int64_t q_norm_rows = 0, k_norm_rows = 0;
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

/// Which blocks hold a slot: every block, the dense (FFN) blocks, the MoE blocks, the MoE blocks
/// whose expert weight gradients are stored (train.expert_grads: stored; in deferred mode the kept
/// operands of deferred_expert_buffers serve as these slots, one set per MoE block and
/// microbatch). A slot kept once exists when the model has such a block; one kept per block exists
/// for each such block. EXPERT_PARALLEL: the MoE blocks under expert parallelism (ActDims::M > 1).
/// QK_NORM: every block of a model with model.qk_norm full or per_head. SHARED: the MoE blocks of a
/// model with shared experts (model.n_shared_experts > 0); SHARED_GATE: those blocks when the shared
/// experts are gated (model.shared_expert_gate: sigmoid).
enum class ActWhen : uint8_t { ALL, DENSE, MOE, MOE_STORED, EXPERT_PARALLEL, QK_NORM, SHARED, SHARED_GATE };

/// How many copies of a slot the plan holds: ONE for the whole step; one per block in EVERY_MODE
/// (the checkpointed block inputs); one per block UNLESS_BLOCK recompute (a block's working slots:
/// kept by attention and none, one shared set recomputed per block under block); one per block
/// IF_NONE (the attention core: recomputed under attention and block). CACHED: as UNLESS_BLOCK in
/// training, and the one kind a KV cache keeps per block (the keys and values every later position
/// reads; its other slots are one shared set).
enum class ActKeep : uint8_t { ONE, EVERY_MODE, UNLESS_BLOCK, IF_NONE, CACHED };

/// True when `keep` gives each block its own copy under recompute mode `r`.
constexpr bool act_kept_per_block(ActKeep keep, Recompute r) {
    switch (keep) {
        case ActKeep::ONE: return false;
        case ActKeep::EVERY_MODE: return true;
        case ActKeep::UNLESS_BLOCK:
        case ActKeep::CACHED: return r != Recompute::BLOCK;
        case ActKeep::IF_NONE: return r == Recompute::NONE;
    }
    return false;
}

/// The ActSlots member type of a slot of pointer type T: T for ONE, else one T per block
/// (n_blocks entries; null for blocks of another kind; all the same buffer where the mode shares it).
template <ActKeep K, class T>
using ActMember = std::conditional_t<K == ActKeep::ONE, T, std::vector<T>>;

/// Named words of ws.scalars (fp32, backend memory): the ops' scalar outputs.
enum ActScalar : int {
    ACT_SCALAR_LM_LOSS = 0,       // mean cross-entropy of the microbatch (lm_head)
    ACT_SCALAR_BALANCE_LOSS = 2,  // balance loss of the MoE block being run
    ACT_SCALAR_Z_LOSS = 3,        // z-loss of the MoE block being run
    ACT_SCALAR_EP_SQ_NORM =
        4,  // words 4-5: one fp64, the expert banks' squared gradient norm summed over the expert-parallel group
};
constexpr int64_t ACT_SCALAR_WORDS = 64;  // words reserved (the plan's ws.scalars)

// clang-format off
// X(member, C++ type, plan name, plan dtype, when, keep, plan kind, first, last, shape...)
// when: which blocks hold the slot (ALL, DENSE: dense FFN blocks, MOE: MoE blocks); a model without
// such a block has no such slot. keep (ActKeep): one slot for the step, or one per block of that kind
// (named "<plan name>.<block>"), in every train.recompute mode or in those that keep it.
// Phases (engine/memory_plan.h): F forward, H head, BW backward (recompute + backward), O optimizer;
// FR: from the forward like F, but a block's working slot that the backward's recompute writes
// again before reading it, so it holds nothing during the head (BufferSpec::dead_in_head) where
// train.recompute does not keep it per block; HF: from the head like H, one of the head's forward
// outputs (the final norm, the logits). A KV cache holds the lines that start in F, FR or HF.
// int64 index buffers are declared to the plan as pairs of int32 words (the plan has no int64 dtype).
#define SKEW_ACTIVATIONS(X) \
    /* the batch, the checkpointed block inputs, the final hidden state */                                                     \
    X(tokens,          int32_t*, "act.tokens",              I32,  ALL,   ONE,          ACTIVATION, F,  BW, D.B, D.T)           \
    X(targets,         int32_t*, "act.targets",             I32,  ALL,   ONE,          ACTIVATION, F,  BW, D.B, D.T)           \
    X(block_input,     bf16*,    "act.block_input",         BF16, ALL,   EVERY_MODE,   ACTIVATION, F,  BW, D.N, D.d)           \
    X(final_input,     bf16*,    "act.final_input",         BF16, ALL,   ONE,          ACTIVATION, F,  H,  D.N, D.d)           \
    /* the working slots of a block: per block where train.recompute keeps them, else one set for all */                       \
    X(ln1_out,         bf16*,    "act.ln1_out",             BF16, ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.d)           \
    X(ln1_mean,        float*,   "act.ln1_mean",            F32,  ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N)                \
    X(ln1_rstd,        float*,   "act.ln1_rstd",            F32,  ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N)                \
    X(q,               bf16*,    "act.q",                   BF16, ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.qd)          \
    X(k,               bf16*,    "act.k",                   BF16, ALL,   CACHED,       ACTIVATION, FR, BW, D.N, D.kvd)         \
    X(v,               bf16*,    "act.v",                   BF16, ALL,   CACHED,       ACTIVATION, FR, BW, D.N, D.kvd)         \
    /* model.qk_norm: q and k before their RMSNorm (after the biases) and its rstd, for the backward */                        \
    X(q_pre,           bf16*,    "act.q_pre",               BF16, QK_NORM, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.qd)        \
    X(k_pre,           bf16*,    "act.k_pre",               BF16, QK_NORM, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.kvd)       \
    X(q_rstd,          float*,   "act.q_rstd",              F32,  QK_NORM, UNLESS_BLOCK, ACTIVATION, FR, BW, D.q_norm_rows)    \
    X(k_rstd,          float*,   "act.k_rstd",              F32,  QK_NORM, UNLESS_BLOCK, ACTIVATION, FR, BW, D.k_norm_rows)    \
    X(attn_lse,        float*,   "act.attn_lse",            F32,  ALL,   IF_NONE,      ACTIVATION, FR, BW, D.B, D.H, D.T)      \
    X(attn_out,        bf16*,    "act.attn_out",            BF16, ALL,   IF_NONE,      ACTIVATION, FR, BW, D.N, D.qd)          \
    X(resid1,          bf16*,    "act.resid1",              BF16, ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.d)           \
    X(ln2_out,         bf16*,    "act.ln2_out",             BF16, ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.d)           \
    X(ln2_mean,        float*,   "act.ln2_mean",            F32,  ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N)                \
    X(ln2_rstd,        float*,   "act.ln2_rstd",            F32,  ALL,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N)                \
    X(ffn_h1,          bf16*,    "act.ffn_h1",              BF16, DENSE, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ff)          \
    X(ffn_h2,          bf16*,    "act.ffn_h2",              BF16, DENSE, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ff)          \
    X(ffn_act,         bf16*,    "act.ffn_act",             BF16, DENSE, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ff)          \
    /* routing of one MoE block */                                                                                             \
    X(router_logits,   float*,   "act.router_logits",       F32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.E)           \
    X(router_probs,    float*,   "act.router_probs",        F32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.E)           \
    X(topk_idx,        int32_t*, "act.topk_idx",            I32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.k)           \
    X(topk_gate,       float*,   "act.topk_gate",           F32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.k)           \
    X(router_counts,   int64_t*, "act.router_counts",       I32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.E, 2)             \
    X(expert_offsets,  int64_t*, "act.expert_offsets",      I32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.E + 1, 2)         \
    X(sorted_to_copy,  int64_t*, "act.moe_sorted_to_copy",  I32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.NK, 2)            \
    X(copy_to_sorted,  int64_t*, "act.moe_copy_to_sorted",  I32,  MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.NK, 2)            \
    X(moe_in,          bf16*,    "act.moe_in",              BF16, MOE_STORED,UNLESS_BLOCK, ACTIVATION, FR, BW, D.NK, D.d)          \
    X(moe_h1,          bf16*,    "act.moe_h1",              BF16, MOE_STORED,UNLESS_BLOCK, ACTIVATION, FR, BW, D.NKr, D.de)         \
    X(moe_h2,          bf16*,    "act.moe_h2",              BF16, MOE_STORED,UNLESS_BLOCK, ACTIVATION, FR, BW, D.NKr, D.de)         \
    X(moe_act,         bf16*,    "act.moe_act",             BF16, MOE_STORED,UNLESS_BLOCK, ACTIVATION, FR, BW, D.NKr, D.de)         \
    X(moe_out,         bf16*,    "act.moe_out",             BF16, MOE,   UNLESS_BLOCK, ACTIVATION, FR, BW, D.NK, D.d)          \
    /* the shared experts of one MoE block (one SwiGLU of width ds on the LN2 rows) and their gate: */                        \
    /* logit = LN2 out . w_gate (fp32), the ungated output s(x) that the gate backward reads         */                        \
    X(shared_h1,       bf16*,    "act.shared_h1",           BF16, SHARED, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ds)         \
    X(shared_h2,       bf16*,    "act.shared_h2",           BF16, SHARED, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ds)         \
    X(shared_act,      bf16*,    "act.shared_act",          BF16, SHARED, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.ds)         \
    X(shared_out,      bf16*,    "act.shared_out",          BF16, SHARED_GATE, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N, D.d)     \
    X(gate_logit,      float*,   "act.shared_gate_logit",   F32,  SHARED_GATE, UNLESS_BLOCK, ACTIVATION, FR, BW, D.N)          \
    /* expert parallel (train.recompute: block only): the all-to-all receive (and return-send) rows,  */                       \
    /* source-rank order; this rank's experts' rows in expert order (input; output, then in the       */                       \
    /* backward the output and input gradients); the permutation both ways; local offsets; counts    */                        \
    X(ep_recv,         bf16*,    "act.ep_recv",             BF16, EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.NKr, D.d)         \
    X(ep_moe_in,       bf16*,    "act.ep_moe_in",           BF16, EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.NKr, D.d)         \
    X(ep_moe_out,      bf16*,    "act.ep_moe_out",          BF16, EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.NKr, D.d)         \
    X(ep_perm,         int64_t*, "act.ep_perm",             I32,  EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.NKr, 2)           \
    X(ep_perm_inv,     int64_t*, "act.ep_perm_inv",         I32,  EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.NKr, 2)           \
    X(ep_offsets,      int64_t*, "act.ep_offsets",          I32,  EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, D.El + 1, 2)        \
    X(ep_counts,       int64_t*, "act.ep_counts",           I32,  EXPERT_PARALLEL, ONE, ACTIVATION, F, BW, 2 * D.E, 2)         \
    /* LM head: final LayerNorm, logits (overwritten in place by their gradient), per-token losses */                          \
    X(final_ln_out,    bf16*,    "act.final_ln_out",        BF16, ALL,   ONE,          ACTIVATION, HF, H,  D.N, D.d)           \
    X(final_ln_mean,   float*,   "act.final_ln_mean",       F32,  ALL,   ONE,          ACTIVATION, HF, H,  D.N)                \
    X(final_ln_rstd,   float*,   "act.final_ln_rstd",       F32,  ALL,   ONE,          ACTIVATION, HF, H,  D.N)                \
    X(logits,          float*,   "act.logits",              F32,  ALL,   ONE,          ACTIVATION, HF, H,  D.logits)           \
    X(losses,          float*,   "act.losses",              F32,  ALL,   ONE,          ACTIVATION, H,  H,  D.N)                \
    X(d_final_ln_out,  bf16*,    "act.d_final_ln_out",      BF16, ALL,   ONE,          ACTIVATION, H,  H,  D.N, D.d)           \
    /* backward: the fp32 residual-stream gradient and the gradients of one block's slots (projection  */                      \
    /* and FFN outputs go straight into the next block's input, so they need no slots of their own)    */                      \
    X(d_stream,        float*,   "act.d_stream",            F32,  ALL,   ONE,          ACTIVATION, H,  BW, D.N, D.d)           \
    X(d_resid,         bf16*,    "act.d_resid",             BF16, ALL,   ONE,          ACTIVATION, H,  BW, D.N, D.d)           \
    X(d_ln_out,        bf16*,    "act.d_ln_out",            BF16, ALL,   ONE,          ACTIVATION, BW, BW, D.N, D.d)           \
    X(d_q,             bf16*,    "act.d_q",                 BF16, ALL,   ONE,          ACTIVATION, BW, BW, D.N, D.qd)          \
    X(d_k,             bf16*,    "act.d_k",                 BF16, ALL,   ONE,          ACTIVATION, BW, BW, D.N, D.kvd)         \
    X(d_v,             bf16*,    "act.d_v",                 BF16, ALL,   ONE,          ACTIVATION, BW, BW, D.N, D.kvd)         \
    X(d_attn_out,      bf16*,    "act.d_attn_out",          BF16, ALL,   ONE,          ACTIVATION, BW, BW, D.N, D.qd)          \
    X(d_ffn_h1,        bf16*,    "act.d_ffn_h1",            BF16, DENSE, ONE,          ACTIVATION, BW, BW, D.N, D.ff)          \
    X(d_ffn_h2,        bf16*,    "act.d_ffn_h2",            BF16, DENSE, ONE,          ACTIVATION, BW, BW, D.N, D.ff)          \
    X(d_ffn_act,       bf16*,    "act.d_ffn_act",           BF16, DENSE, ONE,          ACTIVATION, BW, BW, D.N, D.ff)          \
    X(d_router_logits, float*,   "act.d_router_logits",     F32,  MOE,   ONE,          ACTIVATION, BW, BW, D.N, D.E)           \
    X(d_topk_gate,     float*,   "act.d_topk_gate",         F32,  MOE,   ONE,          ACTIVATION, BW, BW, D.N, D.k)           \
    X(d_moe_out,       bf16*,    "act.d_moe_out",           BF16, MOE_STORED,ONE,          ACTIVATION, BW, BW, D.NK, D.d)          \
    X(d_moe_h1,        bf16*,    "act.d_moe_h1",            BF16, MOE_STORED,ONE,          ACTIVATION, BW, BW, D.NKr, D.de)         \
    X(d_moe_h2,        bf16*,    "act.d_moe_h2",            BF16, MOE_STORED,ONE,          ACTIVATION, BW, BW, D.NKr, D.de)         \
    X(d_moe_act,       bf16*,    "act.d_moe_act",           BF16, MOE,   ONE,          ACTIVATION, BW, BW, D.NKr, D.de)         \
    X(d_moe_in,        bf16*,    "act.d_moe_in",            BF16, MOE,   ONE,          ACTIVATION, BW, BW, D.NK, D.d)          \
    X(d_shared_h1,     bf16*,    "act.d_shared_h1",         BF16, SHARED, ONE,         ACTIVATION, BW, BW, D.N, D.ds)          \
    X(d_shared_h2,     bf16*,    "act.d_shared_h2",         BF16, SHARED, ONE,         ACTIVATION, BW, BW, D.N, D.ds)          \
    X(d_shared_act,    bf16*,    "act.d_shared_act",        BF16, SHARED, ONE,         ACTIVATION, BW, BW, D.N, D.ds)          \
    X(d_shared_out,    bf16*,    "act.d_shared_out",        BF16, SHARED_GATE, ONE,    ACTIVATION, BW, BW, D.N, D.d)           \
    X(d_gate_logit,    float*,   "act.d_shared_gate_logit", F32,  SHARED_GATE, ONE,    ACTIVATION, BW, BW, D.N)                \
    /* the ops' scalar outputs for the whole step (named slots: ActScalar) */                                                  \
    X(scalars,         float*,   "ws.scalars",              F32,  ALL,   ONE,          WORKSPACE,  F,  O,  ACT_SCALAR_WORDS)
// clang-format on

/// The activation slots of one microbatch, bound to the arena (one member per SKEW_ACTIVATIONS line;
/// a slot with keep other than ONE is indexed by block: a.q[b]).
struct ActSlots {
#define SKEW_ACT_MEMBER(member, type, name, dtype, when, keep, ...) ActMember<ActKeep::keep, type> member{};
    SKEW_ACTIVATIONS(SKEW_ACT_MEMBER)
#undef SKEW_ACT_MEMBER
    int64_t logits_bytes = 0;                // bytes of act.logits
    bool fused_head = false;                 // the backend's fused LM head fits act.logits
    Recompute recompute = Recompute::BLOCK;  // the mode the slots were bound for (train.recompute)

    float* scalar(ActScalar s) const { return scalars + int(s); }
};

/// The table's buffers for one microbatch of `cfg.model` under cfg.train.recompute (in table order;
/// a slot kept per block as "<name>.<block>" for each block that holds it), with the dimensions of
/// act_dims. Plan component "activations" (ws.scalars: "workspace"). Throws skew::Error for an
/// unknown train.recompute.
std::vector<BufferSpec> model_activation_buffers(const Config& cfg, const ActDims& D);

/// The buffers of deferred expert weight gradients (train.expert_grads: deferred; docs/design.md
/// "Deferred expert gradients"), which replace the expert banks' "grad.<param>" buffers: per MoE
/// block b and microbatch m of the step's `accum_steps`, the operands of the weight-gradient
/// products dW = dY^T X of the three expert banks, kept from the backward to the optimizer step
/// (kind GRAD, FORWARD..OPTIMIZER, component "kept expert operands"). They are also the block's
/// working slots for that microbatch, so the table's MOE_STORED slots do not exist in this mode:
///   kept.<b>.<m>.moe_in (NK, d) bf16      act.moe_in; X of w1 and w2 (the gathered LN2 rows, expert order)
///   kept.<b>.<m>.moe_act (NK, de) bf16    act.moe_act; X of w3 (the SwiGLU output)
///   kept.<b>.<m>.d_moe_h1 (NK, de) bf16   act.moe_h1 in the forward and recompute, overwritten in
///                                         place by its gradient (act.d_moe_h1), dY of w1
///   kept.<b>.<m>.d_moe_h2 (NK, de) bf16   likewise act.moe_h2, then dY of w2
///   kept.<b>.<m>.d_moe_out (NK, d) bf16   act.d_moe_out; dY of w3
/// (each expert's row range is kept on the host, Model::deferred); and the optimizer step's
/// scratch (OPTIMIZER phase, so it shares bytes with the backward's slots): "ws.expert_grad", one
/// expert matrix (d_expert x d_model, `grad_dtype`) into which one expert's dW is formed at a time,
/// and "ws.expert_gram" (fp32), the Gram blocks of the expert gradient norm: two
/// deferred_gram_chunk_rows(D)^2 blocks and one partial per expert and bank (3 E). Empty when the
/// model has no MoE block.
std::vector<BufferSpec> deferred_expert_buffers(const Config& cfg, const ActDims& D, int64_t accum_steps,
                                                DType grad_dtype);

/// Rows of one Gram block of the deferred expert gradient norm: min(1024, N), the most rows an
/// expert receives from one microbatch being N (top-k experts are distinct).
int64_t deferred_gram_chunk_rows(const ActDims& D);

/// fp32 words at the start of ws.expert_gram holding one partial squared norm per expert and bank
/// (3 E, rounded up to 64 words so the Gram blocks after them stay 256-byte aligned).
int64_t deferred_gram_partials_words(const ActDims& D);

/// "kept.<block>.<microbatch>.": the name prefix of deferred_expert_buffers.
std::string deferred_expert_prefix(int64_t block, int64_t microbatch);

/// Bind every slot of the table that `cfg.model` holds under cfg.train.recompute to the arena's
/// buffer of the same name. Throws skew::Error naming the slot when the plan lacks it (e.g. a plan
/// built for another recompute mode) or holds fewer bytes than the table says.
ActSlots act_slots_bind(const Config& cfg, const ActDims& D, const Arena& arena);

/// Index of the LM head's fp32 logits slot in `plan` (ActSlots::logits, named by its
/// SKEW_ACTIVATIONS line), or -1.
int lm_head_logits_buffer(const MemoryPlan& plan);

/// The buffers of a KV cache of `m` for up to max_len positions (model/inference.h): the table's
/// lines that a forward writes (first phase F, FR or HF) for one sequence of max_len tokens,
/// act_dims(m, 1, max_len, 0), one copy of each, except the CACHED lines (the keys and values),
/// one per block ("act.k.<b>", (max_len, n_kv_heads * head_dim) bf16); the expert slots as stored
/// mode's, no expert-parallel slots. All live together (nothing shares bytes).
std::vector<BufferSpec> kv_cache_buffers(const ModelConfig& m, int64_t max_len);

/// The slots of a KV cache bound to its arena (allocated from kv_cache_buffers(m, max_len)): every
/// block's entry of a slot points at the one buffer, the keys' and values' at their block's.
/// Throws skew::Error naming a slot the arena's plan lacks or holds too small.
ActSlots kv_cache_slots_bind(const ModelConfig& m, int64_t max_len, const Arena& arena);

}  // namespace skew
