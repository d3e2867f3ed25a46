// The parameter table of the MoE transformer (docs/design.md, "The paper's model"; paper Appendix B):
// names, shapes, dtypes, tiers and roles of every parameter, in a fixed order.
#include "engine/param_table.h"

#include "engine/config.h"
#include "engine/error.h"

namespace skew {

int64_t dtype_bytes(DType t) {
    switch (t) {
        case DType::BF16: return 2;
        case DType::F32: return 4;
        case DType::I32: return 4;
        case DType::U16: return 2;
    }
    return 0;
}

int64_t ParamInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t ParamInfo::rows() const { return shape.size() == 1 ? shape[0] : shape[shape.size() - 2]; }

int64_t ParamInfo::cols() const { return shape.size() == 1 ? 1 : shape.back(); }

int64_t ParamInfo::n_matrices() const {
    if (shape.size() == 1) return 0;
    return shape.size() == 3 ? shape[0] : 1;
}

int64_t ParamTable::total_numel() const {
    int64_t n = 0;
    for (const auto& p : params) n += p.numel();
    return n;
}

bool is_expert_bank(const ParamInfo& p) {
    return p.role == Role::EXPERT_W1 || p.role == Role::EXPERT_W2 || p.role == Role::EXPERT_W3;
}

int64_t ParamTable::tier_numel(Tier t) const {
    int64_t n = 0;
    for (const auto& p : params)
        if (p.tier == t) n += p.numel();
    return n;
}

int64_t ParamTable::active_numel(int64_t top_k, int64_t n_experts) const {
    int64_t n = 0;
    for (const auto& p : params) {
        if (p.tier == Tier::EXPERTS) {
            (void)n_experts;  // a bank holds shape[0] experts (all of them, or one rank's share)
            n += p.numel() / p.shape[0] * top_k;
        } else if (p.role != Role::POSITION_EMBEDDING) {
            n += p.numel();
        }
    }
    return n;
}

const ParamInfo* ParamTable::find(const std::string& name) const {
    for (const auto& p : params)
        if (p.name == name) return &p;
    return nullptr;
}

ParamTable build_param_table(const ModelConfig& m) { return build_param_table(m, ExpertShard{}); }

ParamTable build_param_table(const ModelConfig& m, const ExpertShard& shard) {
    const int64_t M = shard.expert_parallel;
    if (M < 1) fail("parallel.expert: must be >= 1 (got {})", M);
    if (M > 1) {
        if (m.n_experts % M != 0) fail("parallel.expert: {} does not divide model.n_experts {}", M, m.n_experts);
        if ((m.d_model * m.d_expert) % 4 != 0)
            fail("parallel.expert: {} needs model.d_model x model.d_expert ({} x {}) to be a multiple of 4", M,
                 m.d_model, m.d_expert);
    }
    if (shard.expert_rank < 0 || shard.expert_rank >= M)
        fail("parallel.expert: rank {} is outside the expert-parallel group of {}", shard.expert_rank, M);
    ParamTable t;
    auto add = [&](std::string name, std::vector<int64_t> shape, DType dtype, Tier tier, Role role, int block) {
        ParamInfo p;
        p.name = std::move(name);
        p.shape = std::move(shape);
        p.dtype = dtype;
        p.tier = tier;
        p.role = role;
        p.block = block;
        p.index = uint32_t(t.params.size());
        t.params.push_back(std::move(p));
    };
    const int64_t d = m.d_model, hd = m.head_dim();
    const int64_t q_out = m.n_heads * hd, kv_out = m.n_kv_heads * hd;
    add("embed.tokens", {m.padded_vocab_size, d}, DType::BF16, Tier::BACKBONE, Role::TOKEN_EMBEDDING, -1);
    if (m.positions == Positions::LEARNED)
        add("embed.positions", {m.max_seq_len, d}, DType::BF16, Tier::BACKBONE, Role::POSITION_EMBEDDING, -1);
    const bool bias = m.norm == NormKind::LAYERNORM;  // RMSNorm: a weight only
    for (int64_t b = 0; b < m.n_blocks; ++b) {
        const std::string pre = "blocks." + std::to_string(b) + ".";
        const int bi = int(b);
        add(pre + "ln1.weight", {d}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, bi);
        if (bias) add(pre + "ln1.bias", {d}, DType::F32, Tier::BACKBONE, Role::NORM_BIAS, bi);
        // Hugging Face's order (Qwen2/Qwen3, OLMoE): q, k, v projections each with its bias, o, then
        // q_norm and k_norm (docs/architectures.md, "Tensor roles")
        add(pre + "attn.wq", {q_out, d}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, bi);
        if (m.attention_bias) add(pre + "attn.bq", {q_out}, DType::F32, Tier::BACKBONE, Role::ATTN_BIAS, bi);
        add(pre + "attn.wk", {kv_out, d}, DType::BF16, Tier::BACKBONE, Role::ATTN_K, bi);
        if (m.attention_bias) add(pre + "attn.bk", {kv_out}, DType::F32, Tier::BACKBONE, Role::ATTN_BIAS, bi);
        add(pre + "attn.wv", {kv_out, d}, DType::BF16, Tier::BACKBONE, Role::ATTN_V, bi);
        if (m.attention_bias) add(pre + "attn.bv", {kv_out}, DType::F32, Tier::BACKBONE, Role::ATTN_BIAS, bi);
        add(pre + "attn.wo", {d, q_out}, DType::BF16, Tier::BACKBONE, Role::ATTN_O, bi);
        if (m.qk_norm != QkNorm::NONE) {  // full: the whole q (k) width; per_head: one head, shared
            const bool full = m.qk_norm == QkNorm::FULL;
            add(pre + "attn.q_norm.weight", {full ? q_out : hd}, DType::F32, Tier::BACKBONE, Role::QK_NORM_WEIGHT, bi);
            add(pre + "attn.k_norm.weight", {full ? kv_out : hd}, DType::F32, Tier::BACKBONE, Role::QK_NORM_WEIGHT, bi);
        }
        add(pre + "ln2.weight", {d}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, bi);
        if (bias) add(pre + "ln2.bias", {d}, DType::F32, Tier::BACKBONE, Role::NORM_BIAS, bi);
        if (m.is_moe_block(b)) {
            const int64_t e = m.n_experts, h = m.d_expert, el = e / M;
            add(pre + "moe.router.weight", {e, d}, DType::F32, Tier::ROUTER, Role::ROUTER, bi);
            add(pre + "moe.experts.w1", {el, h, d}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, bi);
            add(pre + "moe.experts.w2", {el, h, d}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W2, bi);
            add(pre + "moe.experts.w3", {el, d, h}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W3, bi);
            for (size_t i = t.params.size() - 3; i < t.params.size(); ++i)
                t.params[i].expert_offset = shard.expert_rank * el;
            // the shared experts (DeepSeekMoE, Qwen2-MoE): n_shared_experts SwiGLUs of one width on the same
            // input are one SwiGLU of their summed width; dense, so replicated under expert parallelism
            if (const int64_t hs = m.d_shared(); hs > 0) {
                const Tier st = Tier::SHARED_EXPERTS;
                add(pre + "moe.shared_experts.w1", {hs, d}, DType::BF16, st, Role::SHARED_EXPERT_W1, bi);
                add(pre + "moe.shared_experts.w2", {hs, d}, DType::BF16, st, Role::SHARED_EXPERT_W2, bi);
                add(pre + "moe.shared_experts.w3", {d, hs}, DType::BF16, st, Role::SHARED_EXPERT_W3, bi);
                if (m.shared_expert_gate == SharedExpertGate::SIGMOID)
                    add(pre + "moe.shared_experts.gate", {d}, DType::F32, st, Role::SHARED_EXPERT_GATE, bi);
            }
        } else {
            add(pre + "ffn.w1", {m.d_ff, d}, DType::BF16, Tier::BACKBONE, Role::FFN_W1, bi);
            add(pre + "ffn.w2", {m.d_ff, d}, DType::BF16, Tier::BACKBONE, Role::FFN_W2, bi);
            add(pre + "ffn.w3", {d, m.d_ff}, DType::BF16, Tier::BACKBONE, Role::FFN_W3, bi);
        }
    }
    add("final_ln.weight", {d}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, -1);
    if (bias) add("final_ln.bias", {d}, DType::F32, Tier::BACKBONE, Role::NORM_BIAS, -1);
    // the untied LM head: a dense matrix of the backbone as the embedding it replaces (its tier's
    // state; Muon steps it with Adam, as the embeddings: muon_uses_adam)
    if (!m.tie_embeddings) add("lm_head", {m.padded_vocab_size, d}, DType::BF16, Tier::BACKBONE, Role::OUTPUT_HEAD, -1);
    return t;
}

}  // namespace skew
