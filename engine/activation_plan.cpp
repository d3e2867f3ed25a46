// Activation slots and workspace of one training step with per-block activation checkpointing
// (paper Section 4; design.md "The data path"): each block's input is kept from the forward pass
// until its backward; one set of working slots serves every block in turn (forward, then
// recompute + backward); the LM head works on token chunks so full-batch fp32 logits never exist.
#include <fmt/format.h>

#include <algorithm>

#include "engine/cuda_workspace.h"
#include "engine/memory_plan.h"

namespace skew {
namespace {

constexpr int64_t LOGITS_CHUNK_TOKENS = 512;  // tokens per cross-entropy chunk

struct Slots {
    std::vector<BufferSpec>& out;
    void add(const std::string& name, DType dt, std::vector<int64_t> shape, Phase first, Phase last,
             BufferKind kind = BufferKind::ACTIVATION, const std::string& component = "activations") {
        BufferSpec b;
        b.name = name;
        b.kind = kind;
        b.dtype = dt;
        b.shape = std::move(shape);
        b.first = first;
        b.last = last;
        b.component = component;
        out.push_back(std::move(b));
    }
};

}  // namespace

std::vector<BufferSpec> activation_buffers(const Config& cfg, int64_t microbatch) {
    const ModelConfig& m = cfg.model;
    const int64_t B = microbatch, T = cfg.train.seq_len, N = B * T;
    const int64_t d = m.d_model, hd = m.head_dim(), qd = m.n_heads * hd, kvd = m.n_kv_heads * hd;
    const int64_t E = m.n_experts, k = m.top_k, NK = N * k;
    const bool has_moe = !m.moe_blocks.empty();
    const bool has_dense = int64_t(m.moe_blocks.size()) < m.n_blocks;
    std::vector<BufferSpec> out;
    Slots s{out};
    const auto F = Phase::FORWARD, H = Phase::HEAD, BW = Phase::BACKWARD, O = Phase::OPTIMIZER;
    const DType bf = DType::BF16, f32 = DType::F32, i32 = DType::I32;

    // Batch tokens and targets (int32), the checkpointed block inputs and the final hidden state.
    s.add("act.tokens", i32, {B, T}, F, BW);
    s.add("act.targets", i32, {B, T}, F, BW);
    for (int64_t b = 0; b < m.n_blocks; ++b) s.add(fmt::format("act.block_input.{}", b), bf, {N, d}, F, BW);
    s.add("act.final_input", bf, {N, d}, F, H);

    // Working slots of one block (forward and recompute).
    s.add("act.ln1_out", bf, {N, d}, F, BW);
    s.add("act.ln1_mean", f32, {N}, F, BW);
    s.add("act.ln1_rstd", f32, {N}, F, BW);
    s.add("act.q", bf, {N, qd}, F, BW);
    s.add("act.k", bf, {N, kvd}, F, BW);
    s.add("act.v", bf, {N, kvd}, F, BW);
    s.add("act.attn_lse", f32, {B, m.n_heads, T}, F, BW);
    s.add("act.attn_out", bf, {N, qd}, F, BW);
    s.add("act.resid1", bf, {N, d}, F, BW);
    s.add("act.ln2_out", bf, {N, d}, F, BW);
    s.add("act.ln2_mean", f32, {N}, F, BW);
    s.add("act.ln2_rstd", f32, {N}, F, BW);
    if (has_dense) {
        s.add("act.ffn_h1", bf, {N, m.d_ff}, F, BW);
        s.add("act.ffn_h2", bf, {N, m.d_ff}, F, BW);
        s.add("act.ffn_act", bf, {N, m.d_ff}, F, BW);
    }
    if (has_moe) {
        // Routing of one MoE block. int64 buffers (counts, offsets, permutations: the ops' 64-bit
        // indices) are declared as pairs of int32 words, since the plan has no int64 dtype.
        s.add("act.router_logits", f32, {N, E}, F, BW);
        s.add("act.router_probs", f32, {N, E}, F, BW);
        s.add("act.topk_idx", i32, {N, k}, F, BW);
        s.add("act.topk_gate", f32, {N, k}, F, BW);
        s.add("act.router_counts", i32, {E, 2}, F, BW);
        s.add("act.expert_offsets", i32, {E + 1, 2}, F, BW);
        s.add("act.moe_sorted_to_copy", i32, {NK, 2}, F, BW);
        s.add("act.moe_copy_to_sorted", i32, {NK, 2}, F, BW);
        s.add("act.moe_in", bf, {NK, d}, F, BW);
        s.add("act.moe_h1", bf, {NK, m.d_expert}, F, BW);
        s.add("act.moe_h2", bf, {NK, m.d_expert}, F, BW);
        s.add("act.moe_act", bf, {NK, m.d_expert}, F, BW);
        s.add("act.moe_out", bf, {NK, d}, F, BW);
    }

    // LM head: final LayerNorm and chunked logits (fp32, the gradient overwrites them in place).
    s.add("act.final_ln_out", bf, {N, d}, H, H);
    s.add("act.final_ln_mean", f32, {N}, H, H);
    s.add("act.final_ln_rstd", f32, {N}, H, H);
    // act.logits is also the workspace of the backend's fused LM head + cross-entropy (the model
    // uses the fused op when its workspace fits this slot): the CPU backend adds the embedding
    // widened to fp32 and an fp32 accumulator for its gradient (2·Vp·d); the CUDA backend needs
    // its chunk's fp32 logits and bf16 dlogits, an fp32 dwte accumulator and the per-token losses
    // (engine/cuda_workspace.h).
    int64_t logits_elems = std::min(N, LOGITS_CHUNK_TOKENS) * m.padded_vocab_size;
    if (plan_backend(cfg) == "cpu")
        logits_elems += 2 * m.padded_vocab_size * d;
    else
        logits_elems = std::max(logits_elems, (cuda_ws::lm_head_workspace_bytes(N, d, m.padded_vocab_size) + 3) / 4);
    s.add("act.logits", f32, {logits_elems}, H, H);
    s.add("act.losses", f32, {N}, H, H);  // per-token cross-entropy (nats)
    s.add("act.d_final_ln_out", bf, {N, d}, H, H);

    // Backward: the residual-stream gradient (fp32) and the gradients of one block's slots.
    // The attention projection and FFN outputs are written straight into the next block's input
    // (or act.final_input) and the residual added in place, so they need no slots of their own.
    s.add("act.d_stream", f32, {N, d}, H, BW);
    s.add("act.d_resid", bf, {N, d}, H, BW);  // bf16 LayerNorm input gradient, added into d_stream
    s.add("act.d_ln_out", bf, {N, d}, BW, BW);
    s.add("act.d_q", bf, {N, qd}, BW, BW);
    s.add("act.d_k", bf, {N, kvd}, BW, BW);
    s.add("act.d_v", bf, {N, kvd}, BW, BW);
    s.add("act.d_attn_out", bf, {N, qd}, BW, BW);
    if (has_dense) {
        s.add("act.d_ffn_h1", bf, {N, m.d_ff}, BW, BW);
        s.add("act.d_ffn_h2", bf, {N, m.d_ff}, BW, BW);
        s.add("act.d_ffn_act", bf, {N, m.d_ff}, BW, BW);
    }
    if (has_moe) {
        s.add("act.d_router_logits", f32, {N, E}, BW, BW);
        s.add("act.d_topk_gate", f32, {N, k}, BW, BW);
        s.add("act.d_moe_out", bf, {NK, d}, BW, BW);
        s.add("act.d_moe_h1", bf, {NK, m.d_expert}, BW, BW);
        s.add("act.d_moe_h2", bf, {NK, m.d_expert}, BW, BW);
        s.add("act.d_moe_act", bf, {NK, m.d_expert}, BW, BW);
        s.add("act.d_moe_in", bf, {NK, d}, BW, BW);
    }

    // Workspace: loss and grad-norm accumulators for the whole step, the library workspace
    // (cuBLASLt), and the optimizer's scratch for one matrix at a time (Muon's Newton-Schulz
    // needs four matrices of the largest shape; the others one), which shares bytes with the
    // activations since the optimizer runs after backward.
    s.add("ws.scalars", f32, {64}, F, O, BufferKind::WORKSPACE, "workspace");
    if (cfg.runtime.workspace_gib > 0)
        s.add("ws.library", DType::U16, {int64_t(cfg.runtime.workspace_gib * GIB / 2.0)}, F, O, BufferKind::WORKSPACE,
          "workspace");
    return out;
}

}  // namespace skew
