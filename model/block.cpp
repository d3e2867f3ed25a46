// One transformer block's forward over a view of its buffers (model/block.h): training's forward
// and recompute (model/model.cpp) and the KV cache's prefill and decode steps (model/inference.cpp)
// run this code, paper Section 4's block with the architecture choices of docs/architectures.md.
#include "model/block.h"

#include "engine/error.h"
#include "model/expert_exchange.h"
#include "model/layers.h"

namespace skew {

Dims dims_of(const ModelConfig& c, int64_t batch, int64_t seq_len) {
    Dims x{};
    x.B = batch;
    x.T = seq_len;
    x.N = x.B * x.T;
    x.d = c.d_model;
    x.hd = c.head_dim();
    x.H = c.n_heads;
    x.KV = c.n_kv_heads;
    x.qd = x.H * x.hd;
    x.kvd = x.KV * x.hd;
    x.ff = c.d_ff;
    x.E = c.n_experts;
    x.k = c.top_k;
    x.NK = x.N * x.k;
    x.de = c.d_expert;
    x.ds = c.d_shared();
    x.V = c.vocab_size;
    x.Vp = c.padded_vocab_size;
    return x;
}

ExpertSlots stored_expert_slots(const ActSlots& a, size_t b) {
    return ExpertSlots{a.moe_in[b], a.moe_h1[b], a.moe_h2[b], a.moe_act[b], a.d_moe_out, a.d_moe_h1, a.d_moe_h2};
}

RouterOptions router_options(const Model& m, const BlockParams& blk, int64_t mb, uint32_t step, bool noise,
                             int64_t n_tokens) {
    const ModelConfig& c = m.cfg->model;
    RouterOptions o;
    o.noise_std = noise ? float(c.router_noise_std) : 0.0f;
    o.seed = uint64_t(m.cfg->train.seed);
    o.step = step;
    o.tensor = blk.router.info->index;
    o.noise_offset = uint64_t(mb) * uint64_t(n_tokens) * uint64_t(c.n_experts);
    o.balance_alpha = float(c.balance_loss_coef);
    o.z_coef = float(c.z_loss_coef);
    o.normalize_top_k = c.normalize_top_k;
    return o;
}

ExpertRows expert_rows(const Model& m, const ActSlots& a, size_t b, const bf16* moe_in, int64_t n_tokens) {
    if (!m.ep.on()) {
        const ModelConfig& c = m.cfg->model;
        return ExpertRows{moe_in, a.moe_out[b], a.expert_offsets[b], c.n_experts, n_tokens * c.top_k};
    }
    return ExpertRows{m.act.ep_moe_in, m.act.ep_moe_out, m.act.ep_offsets, m.ep.El, m.ep.recv_total};
}

ConstTensorRef linear_weight(const WidenedWeights* widened, const ParamRef& p) {
    if (!widened) return p.w();
    const auto it = widened->find(p.weight);
    return it == widened->end() ? p.w() : ConstTensorRef(it->second.data());
}

namespace {

// A linear layer's weight operand in the view (its fp32 copy when it has one).
ConstTensorRef linear_weight(const BlockView& v, const ParamRef& p) { return linear_weight(v.widened, p); }

// The shared experts of a MoE block (docs/architectures.md, "Shared experts") on its LN2 rows x,
// one SwiGLU of width d_shared: h1 = x·w1^T, h2 = x·w2^T, act = silu(h1)·h2 (the dense FFN's ops);
// gated, also s = act·w3^T and logit = x·w_gate (fp32, a product with one output column). With
// v.out (the routed combine wrote it) their output is added: out += act·w3^T as one product
// accumulating into out (no gate), or out += sigmoid(logit)·s. The recompute stops at what the
// backward reads.
void shared_experts_forward(Model& m, const BlockView& v) {
    const BlockParams& p = m.blocks[size_t(v.block)];
    if (!p.shared_w1.info) return;
    Backend& be = *m.backend;
    const ActSlots& a = *v.act;
    const Dims x = dims_of(m.cfg->model, v.batch, v.rows);
    const size_t b = size_t(v.block);
    be.matmul_forward(a.shared_h1[b], a.ln2_out[b], linear_weight(v, p.shared_w1), x.N, x.d, x.ds);
    be.matmul_forward(a.shared_h2[b], a.ln2_out[b], linear_weight(v, p.shared_w2), x.N, x.d, x.ds);
    be.swiglu_forward(a.shared_act[b], a.shared_h1[b], a.shared_h2[b], x.N * x.ds);
    if (p.shared_gate.info) {
        be.matmul_forward(a.shared_out[b], a.shared_act[b], linear_weight(v, p.shared_w3), x.N, x.ds, x.d);
        be.matmul_forward(a.gate_logit[b], a.ln2_out[b], p.shared_gate.w(), x.N, x.d, 1);
        if (v.out) be.sigmoid_gate_forward(v.out, a.gate_logit[b], a.shared_out[b], x.N, x.d, true);
    } else if (v.out) {
        be.matmul_forward(v.out, a.shared_act[b], linear_weight(v, p.shared_w3), x.N, x.ds, x.d, true);
    }
}

// The MoE side of the block: router (fp32 logits of the LN2 rows, noise, softmax, top-k, aux losses
// into ws.scalars), dropless dispatch, the expert SwiGLUs as grouped products (expert parallel:
// the rows go to their experts' owners and back), the gated combine into v.out, the shared experts.
void moe_forward(Model& m, const BlockView& v, MoeStats* stats) {
    Backend& be = *m.backend;
    const ActSlots& a = *v.act;
    const BlockParams& p = m.blocks[size_t(v.block)];
    const Dims x = dims_of(m.cfg->model, v.batch, v.rows);
    const size_t b = size_t(v.block);
    be.matmul_forward(a.router_logits[b], a.ln2_out[b], p.router.w(), x.N, x.d, x.E);
    const RouterOptions ro = router_options(m, p, v.microbatch, v.step, v.noise, x.N);
    float* bal = a.scalar(ACT_SCALAR_BALANCE_LOSS);
    float* z = a.scalar(ACT_SCALAR_Z_LOSS);
    be.moe_router_forward(a.router_probs[b], a.topk_idx[b], a.topk_gate[b], a.router_counts[b], bal, z, nullptr,
                          a.router_logits[b], RouterShape{x.N, x.E, x.k}, ro);
    if (stats) {
        stats->block = int(v.block);
        stats->counts.resize(size_t(x.E));
        be.copy_to_host(stats->counts.data(), a.router_counts[b], x.E * int64_t(sizeof(int64_t)));
        be.copy_to_host(&stats->balance_loss, bal, sizeof(float));
        be.copy_to_host(&stats->z_loss, z, sizeof(float));
    }
    const ExpertSlots& es = v.experts;
    be.moe_dispatch(a.sorted_to_copy[b], a.copy_to_sorted[b], a.expert_offsets[b], a.topk_idx[b], x.N, x.k, x.E);
    be.moe_gather_forward(es.moe_in, a.ln2_out[b], a.sorted_to_copy[b], x.N, x.k, x.d);
    if (m.ep.on()) {  // the rows go to the ranks that own their experts
        ep_plan_exchange(m, v.block);
        ep_to_owners(m, es.moe_in, m.act.ep_moe_in, x.d);
    }
    const ExpertRows er = expert_rows(m, a, b, es.moe_in, x.N);
    be.moe_matmul_forward(es.h1, er.in, p.expert_w1.w(), er.offsets, er.n_experts, x.d, x.de);
    be.moe_matmul_forward(es.h2, er.in, p.expert_w2.w(), er.offsets, er.n_experts, x.d, x.de);
    be.swiglu_forward(es.act, es.h1, es.h2, er.rows * x.de);
    be.moe_matmul_forward(er.out, es.act, p.expert_w3.w(), er.offsets, er.n_experts, x.de, x.d);
    if (m.ep.on()) ep_from_owners(m, er.out, a.moe_out[b], x.d);  // results back, global expert order
    if (v.out) be.moe_combine_forward(v.out, a.moe_out[b], a.topk_gate[b], a.copy_to_sorted[b], x.N, x.k, x.d);
    shared_experts_forward(m, v);  // out += [gate ·] shared(LN2 out)
}

}  // namespace

void block_attention_forward(Model& m, const BlockView& v) {
    const ModelConfig& c = m.cfg->model;
    const ActSlots& a = *v.act;
    const size_t b = size_t(v.block);
    const AttentionShape as{v.batch, v.rows, c.n_heads, c.n_kv_heads, c.head_dim(), v.pos0 + v.rows};
    m.backend->attention_forward(a.attn_out[b], a.attn_lse[b], a.q[b], a.k[b], a.v[b], as);
}

void block_forward(Model& m, const BlockView& v, MoeStats* stats) {
    Backend& be = *m.backend;
    const ActSlots& a = *v.act;
    const BlockParams& p = m.blocks[size_t(v.block)];
    const ModelConfig& c = m.cfg->model;
    const Dims x = dims_of(c, v.batch, v.rows);
    const size_t b = size_t(v.block);
    if (v.pos0 > 0 && v.batch != 1) fail("model: a block forward after {} cached positions takes one sequence", v.pos0);
    bf16* k_rows = a.k[b] + v.pos0 * x.kvd;  // the new rows' keys and values
    bf16* v_rows = a.v[b] + v.pos0 * x.kvd;

    // attention sub-block: resid1 = inp + wo · attn(norm1(inp)), q and k at their positions
    // (model.attention_bias: + bq, bk, bv; model.qk_norm: q and k normalized from act.q_pre, k_pre)
    norm_forward(be, c, a.ln1_out[b], a.ln1_mean[b], a.ln1_rstd[b], v.input, p.ln1_w, p.ln1_b, x.N);
    const bool qk_norm = c.qk_norm != QkNorm::NONE;
    bf16* q_lin = qk_norm ? a.q_pre[b] : a.q[b];  // the projections' outputs
    bf16* k_lin = qk_norm ? a.k_pre[b] : k_rows;
    be.matmul_forward(q_lin, a.ln1_out[b], linear_weight(v, p.wq), x.N, x.d, x.qd);
    be.matmul_forward(k_lin, a.ln1_out[b], linear_weight(v, p.wk), x.N, x.d, x.kvd);
    be.matmul_forward(v_rows, a.ln1_out[b], linear_weight(v, p.wv), x.N, x.d, x.kvd);
    bias_forward(be, q_lin, p.bq, x.N);
    bias_forward(be, k_lin, p.bk, x.N);
    bias_forward(be, v_rows, p.bv, x.N);
    if (qk_norm) {
        qk_norm_forward(be, c, a.q[b], a.q_rstd[b], q_lin, p.q_norm_w, x.N, x.H);
        qk_norm_forward(be, c, k_rows, a.k_rstd[b], k_lin, p.k_norm_w, x.N, x.KV);
    }
    rotate_qk(be, c, a.q[b], k_rows, x.B, x.T, v.pos0);
    block_attention_forward(m, v);
    be.matmul_forward(a.resid1[b], a.attn_out[b], linear_weight(v, p.wo), x.N, x.qd, x.d);
    be.residual_forward(a.resid1[b], a.resid1[b], v.input, x.N * x.d);

    // FFN sub-block: out = resid1 + FFN(norm2(resid1))
    norm_forward(be, c, a.ln2_out[b], a.ln2_mean[b], a.ln2_rstd[b], a.resid1[b], p.ln2_w, p.ln2_b, x.N);
    if (!p.moe) {
        be.matmul_forward(a.ffn_h1[b], a.ln2_out[b], linear_weight(v, p.ffn_w1), x.N, x.d, x.ff);
        be.matmul_forward(a.ffn_h2[b], a.ln2_out[b], linear_weight(v, p.ffn_w2), x.N, x.d, x.ff);
        be.swiglu_forward(a.ffn_act[b], a.ffn_h1[b], a.ffn_h2[b], x.N * x.ff);
        if (v.out) be.matmul_forward(v.out, a.ffn_act[b], linear_weight(v, p.ffn_w3), x.N, x.ff, x.d);
    } else {
        moe_forward(m, v, stats);
    }
    if (v.out) be.residual_forward(v.out, v.out, a.resid1[b], x.N * x.d);
}

}  // namespace skew
