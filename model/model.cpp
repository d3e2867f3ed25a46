// The MoE transformer's forward and backward over the Backend ops (docs/design.md "The data path";
// paper Section 4): per-block activation checkpointing (forward keeps block inputs, backward
// recomputes each block with the same router noise; or, per train.recompute, the forward keeps
// every block's slots and the backward recomputes only the attention core, or nothing),
// loss = LM + Σ_MoE (balance + z), each / accum. A block's forward is model/block.cpp's, over a
// view of the block's activation slots (training_view).
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "kernels/common/init_math.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/nvtx.h"
#include "model/block.h"
#include "model/expert_exchange.h"
#include "model/layers.h"

namespace skew {
namespace {

ScalarType scalar_of(DType t) { return t == DType::BF16 ? ScalarType::BF16 : ScalarType::F32; }

// The model's only host <-> backend-memory transfers: the batch in, loss scalars, routing counts
// and probe logits out, initial weights in; all through the backend's copies (memcpy on the CPU,
// stream-ordered cudaMemcpy on the GPU; copy_to_host synchronizes).
void to_backend(Backend& be, void* dst, const void* src, size_t bytes) { be.copy_to_device(dst, src, int64_t(bytes)); }
void from_backend(Backend& be, void* dst, const void* src, size_t bytes) { be.copy_to_host(dst, src, int64_t(bytes)); }

template <class T>
T read_scalar(Backend& be, const T* p) {
    T v;
    from_backend(be, &v, p, sizeof(T));
    return v;
}

ParamRef bind_param(const ParamTable& table, Arena& arena, const std::string& name) {
    const ParamInfo* p = table.find(name);
    if (!p) fail("model: parameter '{}' is not in the parameter table", name);
    ParamRef r;
    r.info = p;
    const int wi = arena.plan->weight_of(p->index), gi = arena.plan->grad_of(p->index);
    if (wi < 0) fail("model: the memory plan has no weight buffer for '{}'", name);
    r.weight = arena.ptr(wi);
    if (gi < 0 && is_expert_bank(*p) && arena.plan->find(ws_buffer::EXPERT_GRAD) >= 0) return r;  // deferred: no buffer
    if (gi < 0) fail("model: the memory plan has no gradient buffer 'grad.{}'", name);
    r.grad = TensorRef(arena.ptr(gi), scalar_of(arena.plan->buffers[size_t(gi)].dtype));
    return r;
}

// The sizes of one microbatch (model/block.h).
Dims dims_of(const Model& m) { return dims_of(m.cfg->model, m.microbatch, m.seq_len); }

// The expert slots of MoE block `bi` for microbatch `mb` (model/block.h, ExpertSlots): the table's
// act.moe_* slots in stored mode; in deferred mode the block's kept operands of that microbatch.
ExpertSlots expert_slots(const Model& m, int64_t bi, int64_t mb) {
    if (!m.deferred.on) return stored_expert_slots(m.act, size_t(bi));
    const auto& per_block = m.deferred.kept[size_t(bi)];
    if (mb < 0 || mb >= int64_t(per_block.size()))
        fail("model: microbatch {} is beyond the {} whose expert operands the plan keeps", mb, per_block.size());
    const KeptExpertOperands& k = per_block[size_t(mb)];
    return ExpertSlots{k.moe_in, k.d_moe_h1, k.d_moe_h2, k.moe_act, k.d_moe_out, k.d_moe_h1, k.d_moe_h2};
}

// The view of block `bi`'s forward over the model's activation slots (model/block.h): the
// microbatch's rows from position 0, the block's saved input, its output into `out` (null: the
// recompute), the expert slots of microbatch `mb`.
BlockView training_view(Model& m, int64_t bi, bf16* out, int64_t mb, uint32_t step, bool noise) {
    BlockView v;
    v.act = &m.act;
    v.block = bi;
    v.batch = m.microbatch;
    v.rows = m.seq_len;
    v.input = m.act.block_input[size_t(bi)];
    v.out = out;
    if (m.blocks[size_t(bi)].moe) v.experts = expert_slots(m, bi, mb);
    v.microbatch = mb;
    v.step = step;
    v.noise = noise;
    return v;
}

// The shared experts' backward (docs/architectures.md, "Shared experts"; their forward:
// model/block.cpp) from a.d_resid (dL/d block output, bf16): the gate's (ds = g·dy, dlogit, then
// w_gate's gradient and x's share through the logit product), w3, the SwiGLU, w1 and w2; every
// input gradient accumulates into a.d_ln_out (which the routed experts and the router wrote).
void shared_experts_backward(Model& m, int64_t bi) {
    const BlockParams& p = m.blocks[size_t(bi)];
    if (!p.shared_w1.info) return;
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const Dims x = dims_of(m);
    const size_t b = size_t(bi);
    const bf16* dy = a.d_resid;  // dL/ds without a gate
    if (p.shared_gate.info) {
        be.sigmoid_gate_backward(a.d_shared_out, a.d_gate_logit, a.d_resid, a.gate_logit[b], a.shared_out[b], x.N, x.d);
        be.matmul_backward(a.d_ln_out, p.shared_gate.grad, a.d_gate_logit, a.ln2_out[b], p.shared_gate.w(), x.N, x.d, 1,
                           true);
        dy = a.d_shared_out;
    }
    be.matmul_backward(a.d_shared_act, p.shared_w3.grad, dy, a.shared_act[b], p.shared_w3.w(), x.N, x.ds, x.d);
    be.swiglu_backward(a.d_shared_h1, a.d_shared_h2, a.d_shared_act, a.shared_h1[b], a.shared_h2[b], x.N * x.ds);
    be.matmul_backward(a.d_ln_out, p.shared_w1.grad, a.d_shared_h1, a.ln2_out[b], p.shared_w1.w(), x.N, x.d, x.ds,
                       true);
    be.matmul_backward(a.d_ln_out, p.shared_w2.grad, a.d_shared_h2, a.ln2_out[b], p.shared_w2.w(), x.N, x.d, x.ds,
                       true);
}

// What the backward of block `bi` reads and the forward did not keep (train.recompute;
// model/activations.h): under block the whole block from its saved input, with the same router
// noise (block_forward with out = nullptr); under attention the attention output and logsumexp
// from the kept q, k, v; under none nothing. The same ops on the same inputs as the forward, so
// the backward reads the forward's values bit for bit.
void recompute_for_backward(Model& m, int64_t bi, int64_t mb, uint32_t step, bool noise) {
    switch (m.act.recompute) {
        case Recompute::BLOCK: {
            SKEW_NVTX_RANGE(fmt::format("block {} recompute", bi).c_str());
            block_forward(m, training_view(m, bi, nullptr, mb, step, noise), nullptr);
            return;
        }
        case Recompute::ATTENTION: {
            SKEW_NVTX_RANGE(fmt::format("block {} recompute attention", bi).c_str());
            block_attention_forward(m, training_view(m, bi, nullptr, mb, step, noise));
            return;
        }
        case Recompute::NONE: return;
    }
}

// ---- one block, backward (after recompute_for_backward)

// Deferred mode: the operands of MoE block `bi`'s three weight-gradient products (their products
// were skipped: the banks have no gradient buffer) are already in the block's kept buffers for
// microbatch `mb` (expert_slots); keep the expert offsets on the host.
void keep_expert_offsets(Model& m, int64_t bi, int64_t mb) {
    const Dims x = dims_of(m);
    KeptExpertOperands& k = m.deferred.kept[size_t(bi)][size_t(mb)];
    k.offsets.resize(size_t(x.E + 1));
    from_backend(*m.backend, k.offsets.data(), m.act.expert_offsets[size_t(bi)], k.offsets.size() * sizeof(int64_t));
}

// d_stream (N, d) fp32 holds dL/d(block output) on entry and dL/d(block input) on return.
void block_backward(Model& m, int64_t bi, int64_t mb, uint32_t step, bool noise, float loss_weight) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const BlockParams& p = m.blocks[size_t(bi)];
    const Dims x = dims_of(m);
    const ModelConfig& c = m.cfg->model;
    const size_t b = size_t(bi);

    // FFN sub-block: d_ln_out = dFFN/d(LN2 out)^T · g
    if (!p.moe) {
        // the fp32 stream gradient rounded to bf16 once (as the MoE path does), so both products of
        // w3's backward are bf16 x bf16 with fp32 accumulation (tensor cores on the GPU)
        be.convert(a.d_resid, a.d_stream, x.N * x.d);
        be.matmul_backward(a.d_ffn_act, p.ffn_w3.grad, a.d_resid, a.ffn_act[b], p.ffn_w3.w(), x.N, x.ff, x.d);
        be.swiglu_backward(a.d_ffn_h1, a.d_ffn_h2, a.d_ffn_act, a.ffn_h1[b], a.ffn_h2[b], x.N * x.ff);
        be.matmul_backward(a.d_ln_out, p.ffn_w1.grad, a.d_ffn_h1, a.ln2_out[b], p.ffn_w1.w(), x.N, x.d, x.ff);
        be.matmul_backward(a.d_ln_out, p.ffn_w2.grad, a.d_ffn_h2, a.ln2_out[b], p.ffn_w2.w(), x.N, x.d, x.ff, true);
    } else {
        const ExpertSlots es = expert_slots(m, bi, mb);
        be.convert(a.d_resid, a.d_stream, x.N * x.d);  // combine backward reads a bf16 dout
        be.moe_combine_backward(es.d_out, a.d_topk_gate, a.d_resid, a.moe_out[b], a.topk_gate[b], a.copy_to_sorted[b],
                                x.N, x.k, x.d);
        // expert parallel: output gradients to the owners (into er.out), input gradients come back
        const ExpertRows er = expert_rows(m, a, b, es.moe_in, x.N);
        const bf16* dy = m.ep.on() ? er.out : es.d_out;
        bf16* dx = m.ep.on() ? er.out : a.d_moe_in;
        if (m.ep.on()) ep_to_owners(m, es.d_out, er.out, x.d);
        be.moe_matmul_backward(a.d_moe_act, p.expert_w3.grad, dy, es.act, p.expert_w3.w(), er.offsets, er.n_experts,
                               x.de, x.d);
        // in place in deferred mode (d_h1 over h1, d_h2 over h2: Backend::swiglu_backward allows it)
        be.swiglu_backward(es.d_h1, es.d_h2, a.d_moe_act, es.h1, es.h2, er.rows * x.de);
        be.moe_matmul_backward(dx, p.expert_w1.grad, es.d_h1, er.in, p.expert_w1.w(), er.offsets, er.n_experts, x.d,
                               x.de);
        be.moe_matmul_backward(dx, p.expert_w2.grad, es.d_h2, er.in, p.expert_w2.w(), er.offsets, er.n_experts, x.d,
                               x.de, true);
        if (m.ep.on()) ep_from_owners(m, er.out, a.d_moe_in, x.d);
        if (m.deferred.on) keep_expert_offsets(m, bi, mb);
        be.moe_gather_backward(a.d_ln_out, a.d_moe_in, a.copy_to_sorted[b], x.N, x.k, x.d);
        // router: gates, balance and z-loss (each weighted loss_weight = 1/accum) to the logits
        const RouterShape rs{x.N, x.E, x.k};
        const RouterOptions ro = router_options(m, p, mb, step, noise, x.N);
        be.moe_router_backward(a.d_router_logits, a.d_topk_gate, a.router_logits[b], a.router_probs[b], a.topk_idx[b],
                               a.topk_gate[b], a.router_counts[b], loss_weight, loss_weight, rs, ro);
        be.matmul_backward(a.d_ln_out, p.router.grad, a.d_router_logits, a.ln2_out[b], p.router.w(), x.N, x.d, x.E,
                           true);
        shared_experts_backward(m, bi);
    }
    norm_backward(be, c, a.d_resid, p.ln2_w, p.ln2_b, a.d_ln_out, a.resid1[b], a.ln2_mean[b], a.ln2_rstd[b], x.N);
    be.accumulate(a.d_stream, a.d_resid, x.N * x.d);  // g = d resid1

    // attention sub-block (attn.o's backward reads the stream gradient rounded to bf16, as w3's)
    be.convert(a.d_resid, a.d_stream, x.N * x.d);
    be.matmul_backward(a.d_attn_out, p.wo.grad, a.d_resid, a.attn_out[b], p.wo.w(), x.N, x.qd, x.d);
    const AttentionShape as{x.B, x.T, x.H, x.KV, x.hd};
    be.attention_backward(a.d_q, a.d_k, a.d_v, a.d_attn_out, a.q[b], a.k[b], a.v[b], a.attn_out[b], a.attn_lse[b], as);
    rotate_qk(be, c, a.d_q, a.d_k, x.B, x.T, 0, true);  // to the gradients of q and k before their rotation
    // model.qk_norm: back through q's, then k's RMSNorm into act.d_attn_out (free once the attention's
    // backward has read it; (N, qd) holds k's (N, kvd) too), the gradient of the projection's output
    const bool qk_norm = c.qk_norm != QkNorm::NONE;
    const bf16* dq_lin = qk_norm ? a.d_attn_out : a.d_q;
    if (qk_norm) qk_norm_backward(be, c, a.d_attn_out, p.q_norm_w, a.d_q, a.q_pre[b], a.q_rstd[b], x.N, x.H);
    bias_backward(be, p.bq, dq_lin, x.N);
    be.matmul_backward(a.d_ln_out, p.wq.grad, dq_lin, a.ln1_out[b], p.wq.w(), x.N, x.d, x.qd);
    const bf16* dk_lin = qk_norm ? a.d_attn_out : a.d_k;
    if (qk_norm) qk_norm_backward(be, c, a.d_attn_out, p.k_norm_w, a.d_k, a.k_pre[b], a.k_rstd[b], x.N, x.KV);
    bias_backward(be, p.bk, dk_lin, x.N);
    be.matmul_backward(a.d_ln_out, p.wk.grad, dk_lin, a.ln1_out[b], p.wk.w(), x.N, x.d, x.kvd, true);
    bias_backward(be, p.bv, a.d_v, x.N);
    be.matmul_backward(a.d_ln_out, p.wv.grad, a.d_v, a.ln1_out[b], p.wv.w(), x.N, x.d, x.kvd, true);
    norm_backward(be, c, a.d_resid, p.ln1_w, p.ln1_b, a.d_ln_out, a.block_input[b], a.ln1_mean[b], a.ln1_rstd[b], x.N);
    be.accumulate(a.d_stream, a.d_resid, x.N * x.d);  // g = d block input
}

void check_batch(const Model& m, const int32_t* tokens, const int32_t* targets) {
    const Dims x = dims_of(m);
    for (int64_t i = 0; i < x.N; ++i) {
        if (tokens[i] < 0 || tokens[i] >= x.Vp)
            fail("model: token {} at position {} is outside the embedding table [0, {})", tokens[i], i, x.Vp);
        if (targets[i] < 0 || targets[i] >= x.V)
            fail("model: target {} at position {} is outside the vocabulary [0, {})", targets[i], i, x.V);
    }
}

// LM head (tied: the token embedding; else lm_head) + cross-entropy over the padded vocabulary (mean over the microbatch's tokens, into
// *mean_loss); with `backward`, d_final_ln_out = dL/d(final norm out) and the head's gradient +=,
// weighted loss_weight. Uses the backend's fused op when its workspace fits act.logits, else
// chunks of act.logits through matmul + cross_entropy_forward/backward.
void lm_head(Model& m, float* mean_loss, bool backward, float loss_weight) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const Dims x = dims_of(m);
    const ClassifierShape cs{x.N, x.d, x.V, x.Vp};
    if (a.fused_head) {
        if (backward)
            be.lm_head_cross_entropy(mean_loss, a.losses, a.d_final_ln_out, m.head.grad, a.final_ln_out, m.head.w(),
                                     a.targets, loss_weight, cs, a.logits);
        else
            be.lm_head_cross_entropy(mean_loss, a.losses, nullptr, nullptr, a.final_ln_out, m.head.w(), a.targets, 0.0f,
                                     cs, a.logits);
        return;
    }
    const int64_t chunk = std::max<int64_t>(1, a.logits_bytes / (x.Vp * int64_t(sizeof(float))));
    for (int64_t i0 = 0; i0 < x.N; i0 += chunk) {
        const int64_t n = std::min(chunk, x.N - i0);
        const bf16* xc = a.final_ln_out + i0 * x.d;
        be.matmul_forward(a.logits, xc, m.head.w(), n, x.d, x.Vp);
        be.cross_entropy_forward(a.losses + i0, a.logits, a.targets + i0, n, x.V, x.Vp);
        if (!backward) continue;
        // per-token weight loss_weight / N: the op divides by its own n
        be.cross_entropy_backward(a.logits, a.logits, a.targets + i0, loss_weight * float(n) / float(x.N), n, x.V,
                                  x.Vp);
        be.matmul(a.d_final_ln_out + i0 * x.d, a.logits, m.head.w(), MatmulShape{n, x.d, x.Vp});
        be.matmul(m.head.grad, a.logits, xc, MatmulShape{x.Vp, x.d, n, true, false, 1.0f, 1.0f});
    }
    std::vector<float> losses(size_t(x.N));
    from_backend(be, losses.data(), a.losses, losses.size() * sizeof(float));
    double total = 0.0;
    for (float l : losses) total += l;
    const float mean = float(total / double(x.N));
    to_backend(be, mean_loss, &mean, sizeof(float));
}

// Forward through the embedding and every block (block inputs kept), then the final LayerNorm and
// the LM head + cross-entropy; with `backward`, the head's gradient lands in d_stream.
LossParts forward_and_head(Model& m, const int32_t* tokens, const int32_t* targets, int64_t mb, uint32_t step,
                           bool noise, bool backward, float loss_weight) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const Dims x = dims_of(m);
    check_batch(m, tokens, targets);
    to_backend(be, a.tokens, tokens, size_t(x.N) * sizeof(int32_t));
    to_backend(be, a.targets, targets, size_t(x.N) * sizeof(int32_t));

    LossParts lp;
    {
        SKEW_NVTX_RANGE("embedding forward");
        be.embedding_forward(a.block_input[0], a.tokens, static_cast<const bf16*>(m.wte.weight),
                             static_cast<const bf16*>(m.wpe.weight), x.B, x.T, x.d, x.Vp);
    }
    const int64_t nb = int64_t(m.blocks.size());
    for (int64_t bi = 0; bi < nb; ++bi) {
        bf16* out = bi + 1 < nb ? a.block_input[size_t(bi + 1)] : a.final_input;
        MoeStats st;
        SKEW_NVTX_RANGE(fmt::format("block {} forward", bi).c_str());
        block_forward(m, training_view(m, bi, out, mb, step, noise), m.blocks[size_t(bi)].moe ? &st : nullptr);
        if (m.blocks[size_t(bi)].moe) {
            lp.balance_loss += st.balance_loss;
            lp.z_loss += st.z_loss;
            lp.moe.push_back(std::move(st));
        }
    }

    // head: final norm -> LM head -> cross-entropy over the padded vocabulary
    SKEW_NVTX_RANGE(backward ? "head forward+backward" : "head forward");
    norm_forward(be, m.cfg->model, a.final_ln_out, a.final_ln_mean, a.final_ln_rstd, a.final_input, m.lnf_w, m.lnf_b,
                 x.N);
    if (!m.probe_rows.empty()) {
        lp.probe_logits.resize(m.probe_rows.size() * size_t(x.Vp));
        for (size_t r = 0; r < m.probe_rows.size(); ++r) {
            const int64_t row = m.probe_rows[r];
            if (row < 0 || row >= x.N) fail("model: probe row {} is outside the microbatch's {} tokens", row, x.N);
            be.matmul_forward(a.logits, a.final_ln_out + row * x.d, m.head.w(), 1, x.d, x.Vp);
            from_backend(be, lp.probe_logits.data() + r * size_t(x.Vp), a.logits, size_t(x.Vp) * sizeof(float));
        }
    }
    float* mean_loss = a.scalar(ACT_SCALAR_LM_LOSS);
    lm_head(m, mean_loss, backward, loss_weight);
    if (backward) {
        norm_backward(be, m.cfg->model, a.d_resid, m.lnf_w, m.lnf_b, a.d_final_ln_out, a.final_input, a.final_ln_mean,
                      a.final_ln_rstd, x.N);
        be.convert(a.d_stream, a.d_resid, x.N * x.d);
    }
    lp.lm_loss = read_scalar(be, mean_loss);
    lp.total = lp.lm_loss + lp.balance_loss + lp.z_loss;
    return lp;
}

// The parameters (indices into m.params) whose gradients one stage of the backward completes: the
// head (the final LayerNorm), each block, the embeddings (token and position). Every parameter is in
// exactly one group.
struct GradGroups {
    std::vector<size_t> head, embedding;
    std::vector<std::vector<size_t>> blocks;
};

GradGroups grad_groups(const Model& m) {
    GradGroups g;
    g.blocks.resize(m.blocks.size());
    for (size_t k = 0; k < m.params.size(); ++k) {
        const ParamInfo& p = *m.params[k].info;
        if (p.block >= 0 && size_t(p.block) < m.blocks.size()) g.blocks[size_t(p.block)].push_back(k);
        else if (p.role == Role::TOKEN_EMBEDDING || p.role == Role::POSITION_EMBEDDING) g.embedding.push_back(k);
        else if (p.block < 0) g.head.push_back(k);
        else fail("model: parameter {} names block {} of a model with {} blocks", p.name, p.block, m.blocks.size());
    }
    return g;
}

}  // namespace

Model model_bind(const Config& cfg, const ParamTable& table, Arena& arena, Backend& backend) {
    if (!arena.plan) fail("model: the arena has no memory plan");
    const ModelConfig& c = cfg.model;
    Model m;
    m.cfg = &cfg;
    m.table = &table;
    m.arena = &arena;
    m.backend = &backend;
    m.microbatch = arena.plan->microbatch;
    m.seq_len = arena.plan->seq_len;
    if (m.seq_len > c.max_seq_len) fail("model: seq_len {} exceeds max_seq_len {}", m.seq_len, c.max_seq_len);

    for (const ParamInfo& p : table.params) m.params.push_back(bind_param(table, arena, p.name));
    auto P = [&](const std::string& name) { return bind_param(table, arena, name); };
    // a parameter the architecture may leave out (model.positions, model.norm): empty when absent
    auto maybe = [&](const std::string& name) { return table.find(name) ? P(name) : ParamRef{}; };
    m.wte = P("embed.tokens");
    m.wpe = maybe("embed.positions");
    for (int64_t b = 0; b < c.n_blocks; ++b) {
        const std::string pre = "blocks." + std::to_string(b) + ".";
        BlockParams bp;
        bp.ln1_w = P(pre + "ln1.weight");
        bp.ln1_b = maybe(pre + "ln1.bias");
        bp.wq = P(pre + "attn.wq");
        bp.wk = P(pre + "attn.wk");
        bp.wv = P(pre + "attn.wv");
        bp.wo = P(pre + "attn.wo");
        bp.bq = maybe(pre + "attn.bq");
        bp.bk = maybe(pre + "attn.bk");
        bp.bv = maybe(pre + "attn.bv");
        bp.q_norm_w = maybe(pre + "attn.q_norm.weight");
        bp.k_norm_w = maybe(pre + "attn.k_norm.weight");
        bp.ln2_w = P(pre + "ln2.weight");
        bp.ln2_b = maybe(pre + "ln2.bias");
        bp.moe = c.is_moe_block(b);
        if (bp.moe) {
            bp.router = P(pre + "moe.router.weight");
            bp.expert_w1 = P(pre + "moe.experts.w1");
            bp.expert_w2 = P(pre + "moe.experts.w2");
            bp.expert_w3 = P(pre + "moe.experts.w3");
            bp.shared_w1 = maybe(pre + "moe.shared_experts.w1");  // model.n_shared_experts > 0
            bp.shared_w2 = maybe(pre + "moe.shared_experts.w2");
            bp.shared_w3 = maybe(pre + "moe.shared_experts.w3");
            bp.shared_gate = maybe(pre + "moe.shared_experts.gate");  // model.shared_expert_gate: sigmoid
            bp.moe_index = int(m.n_moe_blocks++);
        } else {
            bp.ffn_w1 = P(pre + "ffn.w1");
            bp.ffn_w2 = P(pre + "ffn.w2");
            bp.ffn_w3 = P(pre + "ffn.w3");
        }
        m.blocks.push_back(bp);
    }
    m.lnf_w = P("final_ln.weight");
    m.lnf_b = maybe("final_ln.bias");
    m.head = c.tie_embeddings ? m.wte : P("lm_head");

    const Dims x = dims_of(m);
    // Bind with the model's own need for act.logits (one chunk of the unfused head); the plan's
    // slot may be larger, and then the backend's fused head runs in it.
    m.ep.M = table_expert_parallel(table, c);
    m.ep.El = c.n_experts / m.ep.M;
    m.act = act_slots_bind(cfg, act_dims(c, m.microbatch, m.seq_len, 0, m.ep.M), arena);
    const ClassifierShape cs{x.N, x.d, x.V, x.Vp};
    m.act.fused_head = backend.lm_head_workspace_bytes(cs) <= m.act.logits_bytes;

    const int si = arena.plan->find(ws_buffer::EXPERT_GRAD);
    if (si >= 0 && m.ep.on())
        fail("model: train.expert_grads: deferred is not supported with parallel.expert {} (use stored)", m.ep.M);
    if (si >= 0) {  // deferred expert gradients: bind the kept operands of every MoE block and microbatch
        m.deferred.on = true;
        m.deferred.scratch = TensorRef(arena.ptr(si), scalar_of(arena.plan->buffers[size_t(si)].dtype));
        const ActDims D = act_dims(c, m.microbatch, m.seq_len, 0);
        m.deferred.gram_rows = deferred_gram_chunk_rows(D);
        m.deferred.gram_partials = deferred_gram_partials_words(D);
        const int gi = arena.plan->find(ws_buffer::EXPERT_GRAM);
        if (gi < 0) fail("model: the memory plan has deferred expert gradients without {}", ws_buffer::EXPERT_GRAM);
        m.deferred.gram = static_cast<float*>(arena.ptr(gi));
        if (arena.plan->buffers[size_t(gi)].numel() <
            m.deferred.gram_partials + 2 * m.deferred.gram_rows * m.deferred.gram_rows)
            fail("model: {} holds {} words, deferred expert gradients need {}", ws_buffer::EXPERT_GRAM,
                 arena.plan->buffers[size_t(gi)].numel(),
                 m.deferred.gram_partials + 2 * m.deferred.gram_rows * m.deferred.gram_rows);
        const int64_t accum = cfg.train.batch_size / m.microbatch;
        m.deferred.kept.resize(m.blocks.size());
        for (size_t b = 0; b < m.blocks.size(); ++b) {
            if (!m.blocks[b].moe) continue;
            for (int64_t mb = 0; mb < accum; ++mb) {
                const std::string pre = deferred_expert_prefix(int64_t(b), mb);
                KeptExpertOperands k;
                k.moe_in = static_cast<bf16*>(arena.ptr(pre + "moe_in"));
                k.moe_act = static_cast<bf16*>(arena.ptr(pre + "moe_act"));
                k.d_moe_h1 = static_cast<bf16*>(arena.ptr(pre + "d_moe_h1"));
                k.d_moe_h2 = static_cast<bf16*>(arena.ptr(pre + "d_moe_h2"));
                k.d_moe_out = static_cast<bf16*>(arena.ptr(pre + "d_moe_out"));
                m.deferred.kept[b].push_back(std::move(k));
            }
        }
    }
    return m;
}

void model_set_expert_comm(Model& m, Communicator* comm) {
    if (!m.ep.on()) {
        if (comm && comm->world_size() != 1)
            fail("model: an expert-parallel group of {} ranks was given, but the parameter table holds every expert",
                 comm->world_size());
        m.ep.comm = comm;
        return;
    }
    if (!comm)
        fail("model: the parameter table holds 1/{} of the experts but no expert-parallel group was given", m.ep.M);
    if (comm->device_memory() != m.backend->device_memory())
        fail("model: the expert-parallel group ({}) moves {} memory but the {} backend's activations are in {} memory",
             comm->describe(), comm->device_memory() ? "device" : "host", m.backend->name(),
             m.backend->device_memory() ? "device" : "host");
    if (comm->world_size() != m.ep.M)
        fail("model: parallel.expert is {} but the expert-parallel group has {} ranks ({})", m.ep.M, comm->world_size(),
             comm->describe());
    for (const BlockParams& b : m.blocks)
        if (b.moe && b.expert_w1.info->expert_offset != comm->rank() * m.ep.El)
            fail("model: rank {} of the expert-parallel group holds experts from {}, its table says {}", comm->rank(),
                 comm->rank() * m.ep.El, b.expert_w1.info->expert_offset);
    m.ep.comm = comm;
}

void model_init(Model& m, uint64_t seed) {
    const ModelConfig& c = m.cfg->model;
    const double out_std = c.init_std / std::sqrt(2.0 * double(c.n_blocks));
    std::vector<float> host;
    std::vector<bf16> host16;
    for (const ParamRef& p : m.params) {
        const ParamInfo& info = *p.info;
        const int64_t n = info.numel();
        const bool normal = info.role != Role::NORM_WEIGHT && info.role != Role::NORM_BIAS &&
                            info.role != Role::ROUTER && info.role != Role::QK_NORM_WEIGHT &&
                            info.role != Role::ATTN_BIAS;
        const bool out_proj = info.role == Role::ATTN_O || info.role == Role::FFN_W3 || info.role == Role::EXPERT_W3 ||
                              info.role == Role::SHARED_EXPERT_W3;
        const float std = float(out_proj ? out_std : c.init_std);
        if (normal && info.element_offset() == 0) {
            // Drawn where the weights live (the CUDA backend: a kernel; the CPU: host loops); no host
            // buffer of the tensor's size is made (an expert bank of the paper's model is 8.6 GB in fp32).
            m.backend->init_normal(TensorRef(p.weight, info.dtype == DType::BF16 ? ScalarType::BF16 : ScalarType::F32),
                                   n, seed, info.index, std);
            continue;
        }
        host.assign(size_t(n), 0.0f);
        switch (info.role) {
            case Role::NORM_WEIGHT:
            case Role::QK_NORM_WEIGHT: std::fill(host.begin(), host.end(), 1.0f); break;
            case Role::NORM_BIAS:
            case Role::ATTN_BIAS:
            case Role::ROUTER: break;  // zero
            default: {
                const int64_t offset = info.element_offset();
                // An expert-parallel shard of a bank: the global elements [offset, offset + n), on the host.
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
                for (int64_t i = 0; i < n; ++i)
                    host[size_t(i)] = init_normal_value(seed, info.index, uint64_t(offset + i), std);
                break;
            }
        }
        if (info.dtype == DType::BF16) {
            host16.resize(size_t(n));
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
            for (int64_t i = 0; i < n; ++i) host16[size_t(i)] = f32_to_bf16(host[size_t(i)]);
            to_backend(*m.backend, p.weight, host16.data(), size_t(n) * sizeof(bf16));
        } else {
            to_backend(*m.backend, p.weight, host.data(), size_t(n) * sizeof(float));
        }
    }
}

void model_zero_grads(Model& m) {
    for (const ParamRef& p : m.params)
        if (p.grad) m.backend->zero(p.grad, p.numel());
    for (auto& per_block : m.deferred.kept)
        for (KeptExpertOperands& k : per_block) k.offsets.clear();  // no microbatch kept yet
}

LossParts model_forward_backward(Model& m, const int32_t* tokens, const int32_t* targets, int64_t microbatch_index,
                                 uint32_t step, int64_t accum_steps, bool training) {
    if (accum_steps < 1) fail("model: accum_steps must be >= 1 (got {})", accum_steps);
    if (microbatch_index < 0) fail("model: negative microbatch index {}", microbatch_index);
    const float w = 1.0f / float(accum_steps);
    LossParts lp;
    {
        SKEW_NVTX_RANGE("forward");
        lp = forward_and_head(m, tokens, targets, microbatch_index, step, training, true, w);
    }
    SKEW_NVTX_RANGE("backward");
    const GradGroups groups = m.grads_done ? grad_groups(m) : GradGroups{};
    if (m.grads_done) m.grads_done(groups.head);  // the final LayerNorm: its backward ran with the head
    // backward in reverse, each block after recomputing what train.recompute did not keep
    for (int64_t bi = int64_t(m.blocks.size()) - 1; bi >= 0; --bi) {
        recompute_for_backward(m, bi, microbatch_index, step, training);
        SKEW_NVTX_RANGE(fmt::format("block {} backward", bi).c_str());
        block_backward(m, bi, microbatch_index, step, training, w);
        if (m.grads_done) m.grads_done(groups.blocks[size_t(bi)]);
    }
    SKEW_NVTX_RANGE("embedding backward");
    const Dims x = dims_of(m);
    m.backend->convert(m.act.d_resid, m.act.d_stream, x.N * x.d);
    m.backend->embedding_backward(m.wte.grad, m.wpe.grad, m.act.d_resid, m.act.tokens, x.B, x.T, x.d, x.Vp);
    if (m.grads_done) m.grads_done(groups.embedding);
    return lp;
}

LossParts model_eval(Model& m, const int32_t* tokens, const int32_t* targets) {
    return forward_and_head(m, tokens, targets, 0, 0, false, false, 0.0f);
}

}  // namespace skew
