// Inference on a trained model (docs/evaluation.md): per-token log-probabilities through the
// trainer's forward, and the KV-cache forward of generation (prefill + decode), both written
// against the Backend ops (paper Section 4's model, router without noise).
#include "model/inference.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "model/layers.h"

namespace skew {

std::vector<std::vector<float>> model_token_logprobs(Model& m, const std::vector<std::vector<int32_t>>& seqs) {
    const int64_t B = m.microbatch, T = m.seq_len, V = m.cfg->model.vocab_size;
    for (size_t s = 0; s < seqs.size(); ++s) {
        const int64_t n = int64_t(seqs[s].size());
        if (n < 1 || n > T + 1)
            fail("inference: sequence {} has {} tokens; scoring needs 1 to seq_len + 1 = {}", s, n, T + 1);
        for (int64_t i = 0; i < n; ++i)
            if (seqs[s][size_t(i)] < 0 || seqs[s][size_t(i)] >= V)
                fail("inference: sequence {} token {} is {}, outside the vocabulary [0, {})", s, i, seqs[s][size_t(i)],
                     V);
    }
    std::vector<std::vector<float>> out(seqs.size());
    std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
    std::vector<float> losses(size_t(B * T));
    for (size_t s0 = 0; s0 < seqs.size(); s0 += size_t(B)) {
        std::fill(tokens.begin(), tokens.end(), 0);
        std::fill(targets.begin(), targets.end(), 0);
        const size_t n_here = std::min(size_t(B), seqs.size() - s0);
        for (size_t b = 0; b < n_here; ++b) {
            const std::vector<int32_t>& q = seqs[s0 + b];
            for (size_t i = 0; i + 1 < q.size(); ++i) {
                tokens[b * size_t(T) + i] = q[i];
                targets[b * size_t(T) + i] = q[i + 1];
            }
        }
        model_eval(m, tokens.data(), targets.data());
        m.backend->copy_to_host(losses.data(), m.act.losses, int64_t(losses.size() * sizeof(float)));
        for (size_t b = 0; b < n_here; ++b) {
            const size_t n = seqs[s0 + b].size() - 1;
            out[s0 + b].resize(n);
            for (size_t i = 0; i < n; ++i) out[s0 + b][i] = -losses[b * size_t(T) + i];
        }
    }
    return out;
}

namespace {

/// The R-row dimension of a KV cache's table rows (kv_cache_buffers).
struct KvDims {
    int64_t R, d, qd, kvd, H, E, K, de, ff, Vp, ds;
};

KvDims kv_dims(const ModelConfig& c, int64_t max_len) {
    const int64_t hd = c.head_dim();
    return KvDims{max_len, c.d_model,  c.n_heads * hd, c.n_kv_heads * hd,   c.n_heads,   c.n_experts,
                  c.top_k, c.d_expert, c.d_ff,         c.padded_vocab_size, c.d_shared()};
}

enum class KvWhen : uint8_t { ALL, DENSE, MOE, QK_NORM, SHARED, SHARED_GATE };

bool kv_row_held(const ModelConfig& c, KvWhen when) {
    const bool has_moe = !c.moe_blocks.empty(), has_dense = int64_t(c.moe_blocks.size()) < c.n_blocks;
    const bool shared = has_moe && c.d_shared() > 0,
               gated = shared && c.shared_expert_gate == SharedExpertGate::SIGMOID;
    return when == KvWhen::ALL || (when == KvWhen::DENSE && has_dense) || (when == KvWhen::MOE && has_moe) ||
           (when == KvWhen::QK_NORM && c.qk_norm != QkNorm::NONE) || (when == KvWhen::SHARED && shared) ||
           (when == KvWhen::SHARED_GATE && gated);
}

/// Every row of the cache as (spec, where its pointer goes), in the table's order with each
/// block's keys and values after the scalars; one list serves the plan and the binding.
template <typename F>
void kv_cache_rows(const ModelConfig& c, int64_t max_len, KvCache* kc, F&& row) {
    const KvDims D = kv_dims(c, max_len);
#define SKEW_KV_ROW(member, type, name, dtype, when, numel) \
    if (kv_row_held(c, KvWhen::when))                       \
        row(name, DType::dtype, int64_t(numel), kc ? reinterpret_cast<void**>(&kc->member) : nullptr);
    SKEW_KV_CACHE_HEAD(SKEW_KV_ROW)
    if (kc) {
        kc->k.assign(size_t(c.n_blocks), nullptr);
        kc->v.assign(size_t(c.n_blocks), nullptr);
    }
    for (int64_t b = 0; b < c.n_blocks; ++b) {
        row("kv.k." + std::to_string(b), DType::BF16, D.R * D.kvd,
            kc ? reinterpret_cast<void**>(&kc->k[size_t(b)]) : nullptr);
        row("kv.v." + std::to_string(b), DType::BF16, D.R * D.kvd,
            kc ? reinterpret_cast<void**>(&kc->v[size_t(b)]) : nullptr);
    }
    SKEW_KV_CACHE_BODY(SKEW_KV_ROW)
#undef SKEW_KV_ROW
}

}  // namespace

std::vector<BufferSpec> kv_cache_buffers(const ModelConfig& c, int64_t max_len) {
    std::vector<BufferSpec> out;
    kv_cache_rows(c, max_len, nullptr, [&](const std::string& name, DType dtype, int64_t numel, void**) {
        BufferSpec s;
        s.name = name;
        s.kind = BufferKind::ACTIVATION;
        s.dtype = dtype;
        s.shape = {numel};
        s.first = Phase::FORWARD;
        s.last = Phase::OPTIMIZER;  // all live together
        out.push_back(s);
    });
    return out;
}

void kv_cache_bind(KvCache& kc, const ModelConfig& c) {
    kv_cache_rows(c, kc.max_len, &kc,
                  [&](const std::string& name, DType, int64_t, void** slot) { *slot = kc.arena.ptr(name); });
}

void kv_cache_widen_weights(KvCache& kc, const Model& m) {
    auto widen = [&](const ParamRef& p) {
        if (p.info->dtype != DType::BF16) return;
        std::vector<float>& w = kc.widened[p.weight];
        w.resize(size_t(p.numel()));
        m.backend->convert(TensorRef(w.data()), p.w(), p.numel());
    };
    widen(m.head);
    for (const BlockParams& b : m.blocks)
        for (const ParamRef* p :
             {&b.wq, &b.wk, &b.wv, &b.wo, &b.ffn_w1, &b.ffn_w2, &b.ffn_w3, &b.shared_w1, &b.shared_w2, &b.shared_w3})
            if (p->info) widen(*p);
}

namespace {

// A linear layer's weight operand: its fp32 copy in the cache when there is one.
ConstTensorRef weight_of(const KvCache& kc, const ParamRef& p) {
    const auto it = kc.widened.find(p.weight);
    return it == kc.widened.end() ? p.w() : ConstTensorRef(it->second.data());
}

}  // namespace

std::vector<float> kv_cache_forward(Model& m, KvCache& kc, std::span<const int32_t> tokens, bool all_logits) {
    const ModelConfig& c = m.cfg->model;
    Backend& be = *m.backend;
    const int64_t n = int64_t(tokens.size()), p0 = kc.length, L = p0 + n;
    if (n < 1) fail("inference: kv_cache_forward needs at least one token");
    if (L > kc.max_len)
        fail("inference: {} new tokens after {} cached overflow the KV cache of {} positions (model.max_seq_len {})", n,
             p0, kc.max_len, c.max_seq_len);
    for (int64_t i = 0; i < n; ++i)
        if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= c.padded_vocab_size)
            fail("inference: token {} at position {} is outside the embedding table [0, {})", tokens[size_t(i)], p0 + i,
                 c.padded_vocab_size);
    const int64_t d = c.d_model, hd = c.head_dim(), H = c.n_heads, KV = c.n_kv_heads, qd = H * hd, kvd = KV * hd;
    const int64_t E = c.n_experts, K = c.top_k, de = c.d_expert, ff = c.d_ff, Vp = c.padded_vocab_size;
    const int64_t ds = c.d_shared();

    be.copy_to_device(kc.tokens, tokens.data(), n * int64_t(sizeof(int32_t)));
    // positions p0.. : the position table read from row p0 (learned), or q and k rotated to them (rope)
    const bf16* wpe = m.wpe.info ? static_cast<const bf16*>(m.wpe.weight) + p0 * d : nullptr;
    be.embedding_forward(kc.x, kc.tokens, static_cast<const bf16*>(m.wte.weight), wpe, 1, n, d, Vp);
    for (size_t bi = 0; bi < m.blocks.size(); ++bi) {
        const BlockParams& p = m.blocks[bi];
        norm_forward(be, c, kc.ln_out, nullptr, nullptr, kc.x, p.ln1_w, p.ln1_b, n);
        // the new rows' q, k, v as the training forward (model.cpp block_forward): projections, biases,
        // q and k normalized (from kc.qk_pre) before their rotation
        bf16 *q_rows = kc.q + p0 * qd, *k_rows = kc.k[bi] + p0 * kvd, *v_rows = kc.v[bi] + p0 * kvd;
        const bool qk_norm = c.qk_norm != QkNorm::NONE;
        bf16* q_lin = qk_norm ? kc.qk_pre : q_rows;
        be.matmul_forward(q_lin, kc.ln_out, weight_of(kc, p.wq), n, d, qd);
        bias_forward(be, q_lin, p.bq, n);
        if (qk_norm) qk_norm_forward(be, c, q_rows, nullptr, q_lin, p.q_norm_w, n, H);
        bf16* k_lin = qk_norm ? kc.qk_pre : k_rows;
        be.matmul_forward(k_lin, kc.ln_out, weight_of(kc, p.wk), n, d, kvd);
        bias_forward(be, k_lin, p.bk, n);
        if (qk_norm) qk_norm_forward(be, c, k_rows, nullptr, k_lin, p.k_norm_w, n, KV);
        be.matmul_forward(v_rows, kc.ln_out, weight_of(kc, p.wv), n, d, kvd);
        bias_forward(be, v_rows, p.bv, n);
        rotate_qk(be, c, q_rows, k_rows, 1, n, p0);  // the new rows only: the cache holds rotated keys
        // causal attention over positions 0..L-1; rows before p0 recompute cached outputs (ignored)
        be.attention_forward(kc.attn_out, kc.lse, kc.q, kc.k[bi], kc.v[bi], AttentionShape{1, L, H, KV, hd});
        be.matmul_forward(kc.resid1, kc.attn_out + p0 * qd, weight_of(kc, p.wo), n, qd, d);
        be.residual_forward(kc.resid1, kc.resid1, kc.x, n * d);
        norm_forward(be, c, kc.ln_out, nullptr, nullptr, kc.resid1, p.ln2_w, p.ln2_b, n);
        if (!p.moe) {
            be.matmul_forward(kc.ffn_h1, kc.ln_out, weight_of(kc, p.ffn_w1), n, d, ff);
            be.matmul_forward(kc.ffn_h2, kc.ln_out, weight_of(kc, p.ffn_w2), n, d, ff);
            be.swiglu_forward(kc.ffn_act, kc.ffn_h1, kc.ffn_h2, n * ff);
            be.matmul_forward(kc.y, kc.ffn_act, weight_of(kc, p.ffn_w3), n, ff, d);
        } else {
            be.matmul_forward(kc.router_logits, kc.ln_out, p.router.w(), n, d, E);
            RouterOptions ro;  // noise_std 0: inference
            ro.balance_alpha = float(c.balance_loss_coef);
            ro.z_coef = float(c.z_loss_coef);
            ro.normalize_top_k = c.normalize_top_k;
            be.moe_router_forward(kc.router_probs, kc.topk_idx, kc.topk_gate, kc.counts, kc.scalars + 0, kc.scalars + 1,
                                  nullptr, kc.router_logits, RouterShape{n, E, K}, ro);
            be.moe_dispatch(kc.sorted_to_copy, kc.copy_to_sorted, kc.offsets, kc.topk_idx, n, K, E);
            be.moe_gather_forward(kc.moe_in, kc.ln_out, kc.sorted_to_copy, n, K, d);
            be.moe_matmul_forward(kc.moe_h1, kc.moe_in, p.expert_w1.w(), kc.offsets, E, d, de);
            be.moe_matmul_forward(kc.moe_h2, kc.moe_in, p.expert_w2.w(), kc.offsets, E, d, de);
            be.swiglu_forward(kc.moe_act, kc.moe_h1, kc.moe_h2, n * K * de);
            be.moe_matmul_forward(kc.moe_out, kc.moe_act, p.expert_w3.w(), kc.offsets, E, de, d);
            be.moe_combine_forward(kc.y, kc.moe_out, kc.topk_gate, kc.copy_to_sorted, n, K, d);
            if (p.shared_w1.info) {  // the shared experts, added as the training forward adds them (model.cpp)
                be.matmul_forward(kc.shared_h1, kc.ln_out, weight_of(kc, p.shared_w1), n, d, ds);
                be.matmul_forward(kc.shared_h2, kc.ln_out, weight_of(kc, p.shared_w2), n, d, ds);
                be.swiglu_forward(kc.shared_act, kc.shared_h1, kc.shared_h2, n * ds);
                if (p.shared_gate.info) {
                    be.matmul_forward(kc.shared_out, kc.shared_act, weight_of(kc, p.shared_w3), n, ds, d);
                    be.matmul_forward(kc.gate_logit, kc.ln_out, p.shared_gate.w(), n, d, 1);
                    be.sigmoid_gate_forward(kc.y, kc.gate_logit, kc.shared_out, n, d, true);
                } else {
                    be.matmul_forward(kc.y, kc.shared_act, weight_of(kc, p.shared_w3), n, ds, d, true);
                }
            }
        }
        be.residual_forward(kc.x, kc.y, kc.resid1, n * d);  // next block's input
    }
    norm_forward(be, c, kc.ln_out, nullptr, nullptr, kc.x, m.lnf_w, m.lnf_b, n);
    const int64_t first = all_logits ? 0 : n - 1, rows = n - first;
    be.matmul_forward(kc.logits, kc.ln_out + first * d, weight_of(kc, m.head), rows, d, Vp);
    std::vector<float> out(size_t(rows * Vp));
    be.copy_to_host(out.data(), kc.logits, int64_t(out.size() * sizeof(float)));
    kc.length = L;
    return out;
}

}  // namespace skew
