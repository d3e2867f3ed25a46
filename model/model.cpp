// The MoE transformer's forward and backward over the Backend ops (docs/design.md "The data path";
// paper Section 4): per-block activation checkpointing (forward keeps block inputs, backward
// recomputes each block with the same router noise), loss = LM + Σ_MoE (balance + z), each / accum.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "kernels/common/init_math.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/nvtx.h"

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
    r.weight = arena.ptr("weight." + name);
    const int gi = arena.plan->find("grad." + name);
    if (gi < 0 && deferred_expert_param(*p) && arena.plan->find("ws.expert_grad") >= 0) return r;  // deferred: no buffer
    if (gi < 0) fail("model: the memory plan has no gradient buffer 'grad.{}'", name);
    r.grad = TensorRef(arena.ptr(gi), scalar_of(arena.plan->buffers[size_t(gi)].dtype));
    return r;
}

// Shapes of one microbatch.
struct Dims {
    int64_t B, T, N, d, hd, qd, kvd, H, KV, ff, E, k, NK, de, V, Vp;
};

Dims dims_of(const Model& m) {
    const ModelConfig& c = m.cfg->model;
    Dims x{};
    x.B = m.microbatch;
    x.T = m.seq_len;
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
    x.V = c.vocab_size;
    x.Vp = c.padded_vocab_size;
    return x;
}

// Router options of MoE block `blk` for microbatch `mb` at `step`.
RouterOptions router_options(const Model& m, const BlockParams& blk, int64_t mb, uint32_t step, bool noise) {
    const ModelConfig& c = m.cfg->model;
    const Dims x = dims_of(m);
    RouterOptions o;
    o.noise_std = noise ? float(c.router_noise_std) : 0.0f;
    o.seed = uint64_t(m.cfg->train.seed);
    o.step = step;
    o.tensor = blk.router.info->index;
    o.noise_offset = uint64_t(mb) * uint64_t(x.N) * uint64_t(x.E);
    o.balance_alpha = float(c.balance_loss_coef);
    o.z_coef = float(c.z_loss_coef);
    return o;
}

// ---- expert parallelism (docs/distributed.md, "Expert parallel")

// Where the grouped expert matmuls of a MoE block run: over the microbatch's NK copies and all E
// experts (one rank), or over the R rows this rank's El experts received (expert parallel).
struct ExpertRows {
    const bf16* in;          // X of w1 and w2 (rows, d), expert order
    bf16* out;               // w3's output (rows, d); in the backward w3's dY, then dX of w1 + w2
    const int64_t* offsets;  // (n_experts + 1) row offsets
    int64_t n_experts, rows;
};

ExpertRows expert_rows(const Model& m) {
    const ActSlots& a = m.act;
    if (!m.ep.on()) {
        const Dims x = dims_of(m);
        return ExpertRows{a.moe_in, a.moe_out, a.expert_offsets, x.E, x.NK};
    }
    return ExpertRows{a.ep_moe_in, a.ep_moe_out, a.ep_offsets, m.ep.El, m.ep.recv_total};
}

void ep_alltoallv(Model& m, const bf16* send, const std::vector<int64_t>& send_rows,
                  const std::vector<int64_t>& send_displs, bf16* recv, const std::vector<int64_t>& recv_rows,
                  const std::vector<int64_t>& recv_displs, int64_t C) {
    const size_t M = size_t(m.ep.M);
    std::vector<int64_t> sc(M), sd(M), rc(M), rd(M);
    for (size_t j = 0; j < M; ++j) {
        sc[j] = send_rows[j] * C;
        sd[j] = send_displs[j] * C;
        rc[j] = recv_rows[j] * C;
        rd[j] = recv_displs[j] * C;
    }
    m.ep.comm->alltoallv(send, sc, sd, recv, rc, rd, CommDType::BF16);
}

// Plan this microbatch's exchange of MoE block rows from the routing (a.expert_offsets over all E
// experts, this rank's tokens): exchange the per-expert row counts with every rank of the group,
// then lay the received rows out in expert order (within an expert, by source rank: the order one
// process would see the group's concatenated tokens in) and upload that permutation both ways
// and the local expert offsets. Host state in m.ep for the exchanges of this block.
void ep_plan_exchange(Model& m) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const Dims x = dims_of(m);
    const int64_t M = m.ep.M, El = m.ep.El;
    if (!m.ep.comm) fail("model: parallel.expert is {} but no expert-parallel group was attached (model_set_expert_comm)", M);
    std::vector<int64_t> offsets(static_cast<size_t>(x.E + 1)), counts(static_cast<size_t>(2 * x.E));
    from_backend(be, offsets.data(), a.expert_offsets, offsets.size() * sizeof(int64_t));
    for (int64_t e = 0; e < x.E; ++e) counts[size_t(e)] = offsets[size_t(e + 1)] - offsets[size_t(e)];
    to_backend(be, a.ep_counts, counts.data(), size_t(x.E) * sizeof(int64_t));
    const std::vector<int64_t> el_counts(size_t(M), El);
    std::vector<int64_t> el_displs(static_cast<size_t>(M));
    for (int64_t j = 0; j < M; ++j) el_displs[size_t(j)] = j * El;
    m.ep.comm->alltoallv(a.ep_counts, el_counts, el_displs, a.ep_counts + x.E, el_counts, el_displs, CommDType::I64);
    from_backend(be, counts.data() + x.E, a.ep_counts + x.E, size_t(x.E) * sizeof(int64_t));
    const int64_t* c = counts.data() + x.E;  // c[i * El + e]: rows from rank i for local expert e

    ExpertParallelState& s = m.ep;
    s.send_rows.assign(size_t(M), 0);
    s.send_row_displs.assign(size_t(M), 0);
    s.recv_rows.assign(size_t(M), 0);
    s.recv_row_displs.assign(size_t(M), 0);
    for (int64_t j = 0; j < M; ++j) {
        s.send_row_displs[size_t(j)] = offsets[size_t(j * El)];
        s.send_rows[size_t(j)] = offsets[size_t((j + 1) * El)] - offsets[size_t(j * El)];
    }
    int64_t R = 0;
    for (int64_t i = 0; i < M; ++i) {
        s.recv_row_displs[size_t(i)] = R;
        for (int64_t e = 0; e < El; ++e) {
            if (c[i * El + e] < 0) fail("model: expert parallel: rank {} sent a negative row count", i);
            s.recv_rows[size_t(i)] += c[i * El + e];
        }
        R += s.recv_rows[size_t(i)];
    }
    if (R > M * x.NK)
        fail("model: expert parallel: {} rows received, beyond the {} the plan holds", R, M * x.NK);
    s.recv_total = R;
    // expert-major position p <- source-major position q
    std::vector<int64_t> perm(static_cast<size_t>(R)), inv(static_cast<size_t>(R)), local_offsets(static_cast<size_t>(El + 1));
    std::vector<int64_t> src_at(static_cast<size_t>(M * El));  // source-major start of block (i, e)
    for (int64_t i = 0; i < M; ++i) {
        int64_t q = s.recv_row_displs[size_t(i)];
        for (int64_t e = 0; e < El; ++e) {
            src_at[size_t(i * El + e)] = q;
            q += c[i * El + e];
        }
    }
    int64_t p = 0;
    for (int64_t e = 0; e < El; ++e) {
        local_offsets[size_t(e)] = p;
        for (int64_t i = 0; i < M; ++i)
            for (int64_t r = 0; r < c[i * El + e]; ++r, ++p) {
                perm[size_t(p)] = src_at[size_t(i * El + e)] + r;
                inv[size_t(perm[size_t(p)])] = p;
            }
    }
    local_offsets[size_t(El)] = R;
    to_backend(be, a.ep_perm, perm.data(), perm.size() * sizeof(int64_t));
    to_backend(be, a.ep_perm_inv, inv.data(), inv.size() * sizeof(int64_t));
    to_backend(be, a.ep_offsets, local_offsets.data(), local_offsets.size() * sizeof(int64_t));
}

// Rows (NK, C) of this rank's token copies in global expert order -> the owners' expert-order
// rows dst (R, C): all-to-all into ep_recv (source-rank order), then the permutation.
void ep_to_owners(Model& m, const bf16* rows, bf16* dst, int64_t C) {
    ExpertParallelState& s = m.ep;
    ep_alltoallv(m, rows, s.send_rows, s.send_row_displs, m.act.ep_recv, s.recv_rows, s.recv_row_displs, C);
    m.backend->moe_gather_forward(dst, m.act.ep_recv, m.act.ep_perm, s.recv_total, 1, C);
}

// The reverse: this rank's expert-order rows src (R, C) -> each source rank's rows (NK, C) in its
// global expert order (the inverse permutation into ep_recv, then the all-to-all back).
void ep_from_owners(Model& m, const bf16* src, bf16* rows, int64_t C) {
    ExpertParallelState& s = m.ep;
    m.backend->moe_gather_forward(m.act.ep_recv, src, m.act.ep_perm_inv, s.recv_total, 1, C);
    ep_alltoallv(m, m.act.ep_recv, s.recv_rows, s.recv_row_displs, rows, s.send_rows, s.send_row_displs, C);
}

// ---- one block, forward (also the recompute of the backward)

// Runs block `bi` from its saved input. When `out` is non-null the block output (N, d) is written
// there (the next block's input); the recompute passes null and stops after the last activation
// the backward reads. Fills *stats for MoE blocks when non-null.
void block_forward(Model& m, int64_t bi, bf16* out, int64_t mb, uint32_t step, bool noise, MoeStats* stats) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const BlockParams& p = m.blocks[size_t(bi)];
    const Dims x = dims_of(m);
    const float eps = float(m.cfg->model.layernorm_eps);
    const bf16* inp = a.block_input[size_t(bi)];

    // attention sub-block: resid1 = inp + wo · attn(LN1(inp))
    be.layernorm_forward(a.ln1_out, a.ln1_mean, a.ln1_rstd, inp, static_cast<const float*>(p.ln1_w.weight),
                         static_cast<const float*>(p.ln1_b.weight), x.N, x.d, eps);
    be.matmul_forward(a.q, a.ln1_out, p.wq.w(), x.N, x.d, x.qd);
    be.matmul_forward(a.k, a.ln1_out, p.wk.w(), x.N, x.d, x.kvd);
    be.matmul_forward(a.v, a.ln1_out, p.wv.w(), x.N, x.d, x.kvd);
    const AttentionShape as{x.B, x.T, x.H, x.KV, x.hd};
    be.attention_forward(a.attn_out, a.attn_lse, a.q, a.k, a.v, as);
    be.matmul_forward(a.resid1, a.attn_out, p.wo.w(), x.N, x.qd, x.d);
    be.residual_forward(a.resid1, a.resid1, inp, x.N * x.d);

    // FFN sub-block: out = resid1 + FFN(LN2(resid1))
    be.layernorm_forward(a.ln2_out, a.ln2_mean, a.ln2_rstd, a.resid1, static_cast<const float*>(p.ln2_w.weight),
                         static_cast<const float*>(p.ln2_b.weight), x.N, x.d, eps);
    if (!p.moe) {
        be.matmul_forward(a.ffn_h1, a.ln2_out, p.ffn_w1.w(), x.N, x.d, x.ff);
        be.matmul_forward(a.ffn_h2, a.ln2_out, p.ffn_w2.w(), x.N, x.d, x.ff);
        be.swiglu_forward(a.ffn_act, a.ffn_h1, a.ffn_h2, x.N * x.ff);
        if (!out) return;
        be.matmul_forward(out, a.ffn_act, p.ffn_w3.w(), x.N, x.ff, x.d);
    } else {
        // router (fp32): clean logits = LN2(resid1) · Wr^T, then noise, softmax, top-k, aux losses
        be.matmul_forward(a.router_logits, a.ln2_out, p.router.w(), x.N, x.d, x.E);
        const RouterShape rs{x.N, x.E, x.k};
        const RouterOptions ro = router_options(m, p, mb, step, noise);
        float* bal = a.scalar(ACT_SCALAR_BALANCE_LOSS);
        float* z = a.scalar(ACT_SCALAR_Z_LOSS);
        be.moe_router_forward(a.router_probs, a.topk_idx, a.topk_gate, a.router_counts, bal, z, nullptr,
                              a.router_logits, rs, ro);
        if (stats) {
            stats->block = int(bi);
            stats->counts.resize(size_t(x.E));
            from_backend(be, stats->counts.data(), a.router_counts, size_t(x.E) * sizeof(int64_t));
            stats->balance_loss = read_scalar(be, bal);
            stats->z_loss = read_scalar(be, z);
        }
        // dropless dispatch -> expert SwiGLU (grouped matmuls) -> weighted combine
        be.moe_dispatch(a.sorted_to_copy, a.copy_to_sorted, a.expert_offsets, a.topk_idx, x.N, x.k, x.E);
        be.moe_gather_forward(a.moe_in, a.ln2_out, a.sorted_to_copy, x.N, x.k, x.d);
        if (m.ep.on()) {  // the rows go to the ranks that own their experts
            ep_plan_exchange(m);
            ep_to_owners(m, a.moe_in, a.ep_moe_in, x.d);
        }
        const ExpertRows er = expert_rows(m);
        be.moe_matmul_forward(a.moe_h1, er.in, p.expert_w1.w(), er.offsets, er.n_experts, x.d, x.de);
        be.moe_matmul_forward(a.moe_h2, er.in, p.expert_w2.w(), er.offsets, er.n_experts, x.d, x.de);
        be.swiglu_forward(a.moe_act, a.moe_h1, a.moe_h2, er.rows * x.de);
        be.moe_matmul_forward(er.out, a.moe_act, p.expert_w3.w(), er.offsets, er.n_experts, x.de, x.d);
        if (m.ep.on()) ep_from_owners(m, er.out, a.moe_out, x.d);  // results back, global expert order
        if (!out) return;
        be.moe_combine_forward(out, a.moe_out, a.topk_gate, a.copy_to_sorted, x.N, x.k, x.d);
    }
    be.residual_forward(out, out, a.resid1, x.N * x.d);
}

// ---- one block, backward (after block_forward(..., out = nullptr) recomputed its activations)

// Deferred mode: copy the operands of MoE block `bi`'s three weight-gradient products (their
// products were skipped: the banks have no gradient buffer) into the block's kept buffers for
// microbatch `mb`, and the expert offsets to the host.
void keep_expert_operands(Model& m, int64_t bi, int64_t mb) {
    Backend& be = *m.backend;
    const ActSlots& a = m.act;
    const Dims x = dims_of(m);
    auto& per_block = m.deferred.kept[size_t(bi)];
    if (mb < 0 || mb >= int64_t(per_block.size()))
        fail("model: microbatch {} is beyond the {} whose expert operands the plan keeps", mb, per_block.size());
    KeptExpertOperands& k = per_block[size_t(mb)];
    auto copy = [&](bf16* dst, const bf16* src, int64_t n) {
        be.convert(TensorRef(dst, ScalarType::BF16), ConstTensorRef(src, ScalarType::BF16), n);
    };
    copy(k.moe_in, a.moe_in, x.NK * x.d);
    copy(k.moe_act, a.moe_act, x.NK * x.de);
    copy(k.d_moe_h1, a.d_moe_h1, x.NK * x.de);
    copy(k.d_moe_h2, a.d_moe_h2, x.NK * x.de);
    copy(k.d_moe_out, a.d_moe_out, x.NK * x.d);
    k.offsets.resize(size_t(x.E + 1));
    from_backend(be, k.offsets.data(), a.expert_offsets, k.offsets.size() * sizeof(int64_t));
}

// d_stream (N, d) fp32 holds dL/d(block output) on entry and dL/d(block input) on return.
void block_backward(Model& m, int64_t bi, int64_t mb, uint32_t step, bool noise, float loss_weight) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const BlockParams& p = m.blocks[size_t(bi)];
    const Dims x = dims_of(m);
    const float* lnw2 = static_cast<const float*>(p.ln2_w.weight);
    const float* lnw1 = static_cast<const float*>(p.ln1_w.weight);

    // FFN sub-block: d_ln_out = dFFN/d(LN2 out)^T · g
    if (!p.moe) {
        // the fp32 stream gradient rounded to bf16 once (as the MoE path does), so both products of
        // w3's backward are bf16 x bf16 with fp32 accumulation (tensor cores on the GPU)
        be.convert(a.d_resid, a.d_stream, x.N * x.d);
        be.matmul_backward(a.d_ffn_act, p.ffn_w3.grad, a.d_resid, a.ffn_act, p.ffn_w3.w(), x.N, x.ff, x.d);
        be.swiglu_backward(a.d_ffn_h1, a.d_ffn_h2, a.d_ffn_act, a.ffn_h1, a.ffn_h2, x.N * x.ff);
        be.matmul_backward(a.d_ln_out, p.ffn_w1.grad, a.d_ffn_h1, a.ln2_out, p.ffn_w1.w(), x.N, x.d, x.ff);
        be.matmul_backward(a.d_ln_out, p.ffn_w2.grad, a.d_ffn_h2, a.ln2_out, p.ffn_w2.w(), x.N, x.d, x.ff, true);
    } else {
        be.convert(a.d_resid, a.d_stream, x.N * x.d);  // combine backward reads a bf16 dout
        be.moe_combine_backward(a.d_moe_out, a.d_topk_gate, a.d_resid, a.moe_out, a.topk_gate, a.copy_to_sorted, x.N,
                                x.k, x.d);
        // expert parallel: output gradients to the owners (into er.out), input gradients come back
        const ExpertRows er = expert_rows(m);
        const bf16* dy = m.ep.on() ? er.out : a.d_moe_out;
        bf16* dx = m.ep.on() ? er.out : a.d_moe_in;
        if (m.ep.on()) ep_to_owners(m, a.d_moe_out, er.out, x.d);
        be.moe_matmul_backward(a.d_moe_act, p.expert_w3.grad, dy, a.moe_act, p.expert_w3.w(), er.offsets,
                               er.n_experts, x.de, x.d);
        be.swiglu_backward(a.d_moe_h1, a.d_moe_h2, a.d_moe_act, a.moe_h1, a.moe_h2, er.rows * x.de);
        be.moe_matmul_backward(dx, p.expert_w1.grad, a.d_moe_h1, er.in, p.expert_w1.w(), er.offsets, er.n_experts,
                               x.d, x.de);
        be.moe_matmul_backward(dx, p.expert_w2.grad, a.d_moe_h2, er.in, p.expert_w2.w(), er.offsets, er.n_experts,
                               x.d, x.de, true);
        if (m.ep.on()) ep_from_owners(m, er.out, a.d_moe_in, x.d);
        if (m.deferred.on) keep_expert_operands(m, bi, mb);
        be.moe_gather_backward(a.d_ln_out, a.d_moe_in, a.copy_to_sorted, x.N, x.k, x.d);
        // router: gates, balance and z-loss (each weighted loss_weight = 1/accum) to the logits
        const RouterShape rs{x.N, x.E, x.k};
        const RouterOptions ro = router_options(m, p, mb, step, noise);
        be.moe_router_backward(a.d_router_logits, a.d_topk_gate, a.router_logits, a.router_probs, a.topk_idx,
                               a.topk_gate, a.router_counts, loss_weight, loss_weight, rs, ro);
        be.matmul_backward(a.d_ln_out, p.router.grad, a.d_router_logits, a.ln2_out, p.router.w(), x.N, x.d, x.E, true);
    }
    be.layernorm_backward(a.d_resid, static_cast<float*>(p.ln2_w.grad.data), static_cast<float*>(p.ln2_b.grad.data),
                          a.d_ln_out, a.resid1, lnw2, a.ln2_mean, a.ln2_rstd, x.N, x.d);
    be.accumulate(a.d_stream, a.d_resid, x.N * x.d);  // g = d resid1

    // attention sub-block (attn.o's backward reads the stream gradient rounded to bf16, as w3's)
    be.convert(a.d_resid, a.d_stream, x.N * x.d);
    be.matmul_backward(a.d_attn_out, p.wo.grad, a.d_resid, a.attn_out, p.wo.w(), x.N, x.qd, x.d);
    const AttentionShape as{x.B, x.T, x.H, x.KV, x.hd};
    be.attention_backward(a.d_q, a.d_k, a.d_v, a.d_attn_out, a.q, a.k, a.v, a.attn_out, a.attn_lse, as);
    be.matmul_backward(a.d_ln_out, p.wq.grad, a.d_q, a.ln1_out, p.wq.w(), x.N, x.d, x.qd);
    be.matmul_backward(a.d_ln_out, p.wk.grad, a.d_k, a.ln1_out, p.wk.w(), x.N, x.d, x.kvd, true);
    be.matmul_backward(a.d_ln_out, p.wv.grad, a.d_v, a.ln1_out, p.wv.w(), x.N, x.d, x.kvd, true);
    be.layernorm_backward(a.d_resid, static_cast<float*>(p.ln1_w.grad.data), static_cast<float*>(p.ln1_b.grad.data),
                          a.d_ln_out, a.block_input[size_t(bi)], lnw1, a.ln1_mean, a.ln1_rstd, x.N, x.d);
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

// Tied LM head + cross-entropy over the padded vocabulary (mean over the microbatch's tokens, into
// *mean_loss); with `backward`, d_final_ln_out = dL/d(final LN out) and grad.embed.tokens +=,
// weighted loss_weight. Uses the backend's fused op when its workspace fits act.logits, else
// chunks of act.logits through matmul + cross_entropy_forward/backward.
void lm_head(Model& m, float* mean_loss, bool backward, float loss_weight) {
    Backend& be = *m.backend;
    ActSlots& a = m.act;
    const Dims x = dims_of(m);
    const ClassifierShape cs{x.N, x.d, x.V, x.Vp};
    if (a.fused_head) {
        if (backward)
            be.lm_head_cross_entropy(mean_loss, a.losses, a.d_final_ln_out, m.wte.grad, a.final_ln_out, m.wte.w(),
                                     a.targets, loss_weight, cs, a.logits);
        else
            be.lm_head_cross_entropy(mean_loss, a.losses, nullptr, nullptr, a.final_ln_out, m.wte.w(), a.targets, 0.0f,
                                     cs, a.logits);
        return;
    }
    const int64_t chunk = std::max<int64_t>(1, a.logits_bytes / (x.Vp * int64_t(sizeof(float))));
    for (int64_t i0 = 0; i0 < x.N; i0 += chunk) {
        const int64_t n = std::min(chunk, x.N - i0);
        const bf16* xc = a.final_ln_out + i0 * x.d;
        be.matmul_forward(a.logits, xc, m.wte.w(), n, x.d, x.Vp);
        be.cross_entropy_forward(a.losses + i0, a.logits, a.targets + i0, n, x.V, x.Vp);
        if (!backward) continue;
        // per-token weight loss_weight / N: the op divides by its own n
        be.cross_entropy_backward(a.logits, a.logits, a.targets + i0, loss_weight * float(n) / float(x.N), n, x.V, x.Vp);
        be.matmul(a.d_final_ln_out + i0 * x.d, a.logits, m.wte.w(), MatmulShape{n, x.d, x.Vp});
        be.matmul(m.wte.grad, a.logits, xc, MatmulShape{x.Vp, x.d, n, true, false, 1.0f, 1.0f});
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
        block_forward(m, bi, out, mb, step, noise, m.blocks[size_t(bi)].moe ? &st : nullptr);
        if (m.blocks[size_t(bi)].moe) {
            lp.balance_loss += st.balance_loss;
            lp.z_loss += st.z_loss;
            lp.moe.push_back(std::move(st));
        }
    }

    // head: final LayerNorm -> tied LM head -> cross-entropy over the padded vocabulary
    SKEW_NVTX_RANGE(backward ? "head forward+backward" : "head forward");
    be.layernorm_forward(a.final_ln_out, a.final_ln_mean, a.final_ln_rstd, a.final_input,
                         static_cast<const float*>(m.lnf_w.weight), static_cast<const float*>(m.lnf_b.weight), x.N, x.d,
                         float(m.cfg->model.layernorm_eps));
    if (!m.probe_rows.empty()) {
        lp.probe_logits.resize(m.probe_rows.size() * size_t(x.Vp));
        for (size_t r = 0; r < m.probe_rows.size(); ++r) {
            const int64_t row = m.probe_rows[r];
            if (row < 0 || row >= x.N) fail("model: probe row {} is outside the microbatch's {} tokens", row, x.N);
            be.matmul_forward(a.logits, a.final_ln_out + row * x.d, m.wte.w(), 1, x.d, x.Vp);
            from_backend(be, lp.probe_logits.data() + r * size_t(x.Vp), a.logits, size_t(x.Vp) * sizeof(float));
        }
    }
    float* mean_loss = a.scalar(ACT_SCALAR_LM_LOSS);
    lm_head(m, mean_loss, backward, loss_weight);
    if (backward) {
        be.layernorm_backward(a.d_resid, static_cast<float*>(m.lnf_w.grad.data), static_cast<float*>(m.lnf_b.grad.data),
                              a.d_final_ln_out, a.final_input, static_cast<const float*>(m.lnf_w.weight),
                              a.final_ln_mean, a.final_ln_rstd, x.N, x.d);
        be.convert(a.d_stream, a.d_resid, x.N * x.d);
    }
    lp.lm_loss = read_scalar(be, mean_loss);
    lp.total = lp.lm_loss + lp.balance_loss + lp.z_loss;
    return lp;
}

}  // namespace

Model model_bind(const Config& cfg, const ParamTable& table, Arena& arena, Backend& backend) {
    if (!arena.plan) fail("model: the arena has no memory plan");
    const ModelConfig& c = cfg.model;
    if (c.head_dim() * c.n_heads != c.d_model)
        fail("model: d_model {} is not n_heads {} x head_dim", c.d_model, c.n_heads);
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
    m.wte = P("embed.tokens");
    m.wpe = P("embed.positions");
    for (int64_t b = 0; b < c.n_blocks; ++b) {
        const std::string pre = "blocks." + std::to_string(b) + ".";
        BlockParams bp;
        bp.ln1_w = P(pre + "ln1.weight");
        bp.ln1_b = P(pre + "ln1.bias");
        bp.wq = P(pre + "attn.wq");
        bp.wk = P(pre + "attn.wk");
        bp.wv = P(pre + "attn.wv");
        bp.wo = P(pre + "attn.wo");
        bp.ln2_w = P(pre + "ln2.weight");
        bp.ln2_b = P(pre + "ln2.bias");
        bp.moe = c.is_moe_block(b);
        if (bp.moe) {
            bp.router = P(pre + "moe.router.weight");
            bp.expert_w1 = P(pre + "moe.experts.w1");
            bp.expert_w2 = P(pre + "moe.experts.w2");
            bp.expert_w3 = P(pre + "moe.experts.w3");
            bp.moe_index = int(m.n_moe_blocks++);
        } else {
            bp.ffn_w1 = P(pre + "ffn.w1");
            bp.ffn_w2 = P(pre + "ffn.w2");
            bp.ffn_w3 = P(pre + "ffn.w3");
        }
        m.blocks.push_back(bp);
    }
    m.lnf_w = P("final_ln.weight");
    m.lnf_b = P("final_ln.bias");

    const Dims x = dims_of(m);
    // Bind with the model's own need for act.logits (one chunk of the unfused head); the plan's
    // slot may be larger, and then the backend's fused head runs in it.
    m.ep.M = table_expert_parallel(table, c);
    m.ep.El = c.n_experts / m.ep.M;
    m.act = act_slots_bind(cfg, act_dims(c, m.microbatch, m.seq_len, 0, m.ep.M), arena);
    const ClassifierShape cs{x.N, x.d, x.V, x.Vp};
    m.act.fused_head = backend.lm_head_workspace_bytes(cs) <= m.act.logits_bytes;

    const int si = arena.plan->find("ws.expert_grad");
    if (si >= 0 && m.ep.on())
        fail("model: train.expert_grads: deferred is not supported with parallel.expert {} (use stored)", m.ep.M);
    if (si >= 0) {  // deferred expert gradients: bind the kept operands of every MoE block and microbatch
        m.deferred.on = true;
        m.deferred.scratch = TensorRef(arena.ptr(si), scalar_of(arena.plan->buffers[size_t(si)].dtype));
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
    if (!comm) fail("model: the parameter table holds 1/{} of the experts but no expert-parallel group was given", m.ep.M);
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
        host.assign(size_t(n), 0.0f);
        switch (info.role) {
            case Role::NORM_WEIGHT: std::fill(host.begin(), host.end(), 1.0f); break;
            case Role::NORM_BIAS:
            case Role::ROUTER: break;  // zero
            default: {
                const bool out_proj =
                    info.role == Role::ATTN_O || info.role == Role::FFN_W3 || info.role == Role::EXPERT_W3;
                const float std = float(out_proj ? out_std : c.init_std);
                const int64_t offset = info.element_offset();
                if (offset == 0) {
                    // Drawn where the weights live (the CUDA backend: a kernel; the CPU: host loops).
                    m.backend->init_normal(TensorRef(p.weight, info.dtype == DType::BF16 ? ScalarType::BF16 : ScalarType::F32),
                                           n, seed, info.index, std);
                    continue;
                }
                // An expert-parallel shard of a bank: the global elements [offset, offset + n), on the host.
#pragma omp parallel for schedule(static) if (n > (int64_t(1) << 16))
                for (int64_t i = 0; i < n; ++i) host[size_t(i)] = init_normal_value(seed, info.index, uint64_t(offset + i), std);
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
    // backward in reverse, recomputing each block from its saved input (same router noise)
    for (int64_t bi = int64_t(m.blocks.size()) - 1; bi >= 0; --bi) {
        {
            SKEW_NVTX_RANGE(fmt::format("block {} recompute", bi).c_str());
            block_forward(m, bi, nullptr, microbatch_index, step, training, nullptr);
        }
        SKEW_NVTX_RANGE(fmt::format("block {} backward", bi).c_str());
        block_backward(m, bi, microbatch_index, step, training, w);
    }
    SKEW_NVTX_RANGE("embedding backward");
    const Dims x = dims_of(m);
    m.backend->convert(m.act.d_resid, m.act.d_stream, x.N * x.d);
    m.backend->embedding_backward(m.wte.grad, m.wpe.grad, m.act.d_resid, m.act.tokens, x.B, x.T, x.d, x.Vp);
    return lp;
}

LossParts model_eval(Model& m, const int32_t* tokens, const int32_t* targets) {
    return forward_and_head(m, tokens, targets, 0, 0, false, false, 0.0f);
}

double gram_grad_sq_norm(const float* X, const float* dY, int64_t rows, int64_t in_features, int64_t out_features) {
    double total = 0.0;
#pragma omp parallel for schedule(dynamic) reduction(+ : total) if (rows > 64)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xi = X + i * in_features;
        const float* yi = dY + i * out_features;
        double row = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
            const float* xj = X + j * in_features;
            const float* yj = dY + j * out_features;
            double gx = 0.0, gy = 0.0;
            for (int64_t c = 0; c < in_features; ++c) gx += double(xi[c]) * double(xj[c]);
            for (int64_t c = 0; c < out_features; ++c) gy += double(yi[c]) * double(yj[c]);
            row += (j == i ? 1.0 : 2.0) * gx * gy;
        }
        total += row;
    }
    return total;
}

double deferred_expert_grad_sq_norm(Model& m) {
    if (!m.deferred.on) return 0.0;
    Backend& be = *m.backend;
    const Dims x = dims_of(m);
    std::vector<bf16> host16;
    auto fetch = [&](const bf16* src, int64_t n) {
        host16.resize(size_t(n));
        from_backend(be, host16.data(), src, size_t(n) * sizeof(bf16));
        std::vector<float> out(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) out[size_t(i)] = bf16_to_f32(host16[size_t(i)]);
        return out;
    };
    double total = 0.0;
    for (const auto& per_block : m.deferred.kept) {
        // each operand of every kept microbatch, on the host in fp32
        struct Host {
            std::vector<float> moe_in, moe_act, dh1, dh2, dout;
            const std::vector<int64_t>* offsets;
        };
        std::vector<Host> mbs;
        for (const KeptExpertOperands& k : per_block) {
            if (k.offsets.empty()) continue;  // microbatch not run this step
            mbs.push_back(Host{fetch(k.moe_in, x.NK * x.d), fetch(k.moe_act, x.NK * x.de), fetch(k.d_moe_h1, x.NK * x.de),
                               fetch(k.d_moe_h2, x.NK * x.de), fetch(k.d_moe_out, x.NK * x.d), &k.offsets});
        }
        if (mbs.empty()) continue;
        // per expert: the rows of every microbatch stacked, then the Gram identity per bank
        for (int64_t e = 0; e < x.E; ++e) {
            std::vector<float> X1, A, Y1, Y2, Y3;
            for (const Host& h : mbs) {
                const int64_t r0 = (*h.offsets)[size_t(e)], r1 = (*h.offsets)[size_t(e + 1)];
                X1.insert(X1.end(), h.moe_in.begin() + r0 * x.d, h.moe_in.begin() + r1 * x.d);
                A.insert(A.end(), h.moe_act.begin() + r0 * x.de, h.moe_act.begin() + r1 * x.de);
                Y1.insert(Y1.end(), h.dh1.begin() + r0 * x.de, h.dh1.begin() + r1 * x.de);
                Y2.insert(Y2.end(), h.dh2.begin() + r0 * x.de, h.dh2.begin() + r1 * x.de);
                Y3.insert(Y3.end(), h.dout.begin() + r0 * x.d, h.dout.begin() + r1 * x.d);
            }
            const int64_t n = int64_t(X1.size()) / x.d;
            if (n == 0) continue;
            total += gram_grad_sq_norm(X1.data(), Y1.data(), n, x.d, x.de);  // w1
            total += gram_grad_sq_norm(X1.data(), Y2.data(), n, x.d, x.de);  // w2
            total += gram_grad_sq_norm(A.data(), Y3.data(), n, x.de, x.d);   // w3
        }
    }
    return total;
}

double model_grad_norm(Model& m) {
    std::vector<BufferRef> bufs, expert_bufs;
    bufs.reserve(m.params.size());
    for (const ParamRef& p : m.params)
        if (p.grad) (m.ep.on() && p.info->tier == Tier::EXPERTS ? expert_bufs : bufs).push_back(BufferRef{ConstTensorRef(p.grad), p.numel()});
    double sq = m.backend->sum_squares(bufs) + deferred_expert_grad_sq_norm(m);
    if (m.ep.on()) {  // each rank of the group holds other experts: their squares sum over the group
        double e2 = m.backend->sum_squares(expert_bufs);
        if (!m.ep.comm) fail("model: parallel.expert is {} but no expert-parallel group was attached", m.ep.M);
        auto* slot = reinterpret_cast<double*>(m.act.scalar(ACT_SCALAR_EP_SQ_NORM));
        to_backend(*m.backend, slot, &e2, sizeof(double));
        m.ep.comm->allreduce_sum(slot, 1, CommDType::F64);
        from_backend(*m.backend, &e2, slot, sizeof(double));
        sq += e2;
    }
    return std::sqrt(sq);
}

double model_clip_gradients(Model& m, double max_norm) {
    m.deferred.clip_coef = 1.0f;
    const double norm = model_grad_norm(m);
    if (max_norm <= 0.0 || !std::isfinite(norm)) return norm;
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        for (const ParamRef& p : m.params)
            if (p.grad) m.backend->scale(p.grad, float(coef), p.numel());
        m.deferred.clip_coef = float(coef);
    }
    return norm;
}

}  // namespace skew
