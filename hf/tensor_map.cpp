// The one mapping of tensor names between the Hugging Face checkpoints and skew's parameter table
// (docs/huggingface.md, "Tensors"); import and export both read it.
#include "hf/tensor_map.h"

#include "engine/error.h"

namespace skew::hf {

int64_t HfTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

namespace {

bool ends_with(const std::string& s, const char* tail) {
    const std::string t(tail);
    return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

std::vector<HfTensor> hf_tensors(Family f, const ModelConfig& m, const ParamTable& table) {
    const FamilySpec& fam = family_spec(f);
    std::vector<HfTensor> out;
    for (size_t i = 0; i < table.params.size(); ++i) {
        const ParamInfo& p = table.params[i];
        const std::string layer = "model.layers." + std::to_string(p.block) + ".";
        auto whole = [&](std::string name) { out.push_back(HfTensor{std::move(name), p.shape, i, 0}); };
        // the first vocab_size rows of a padded (padded_vocab_size, d_model) matrix
        auto vocab_rows = [&](std::string name) {
            out.push_back(HfTensor{std::move(name), {m.vocab_size, p.shape[1]}, i, 0});
        };
        // expert e of a stacked bank (E, rows, cols): one (rows, cols) tensor per expert
        auto experts = [&](int projection) {  // 0 gate, 1 up, 2 down
            for (int64_t e = 0; e < p.shape[0]; ++e) {
                const std::string base = layer + fam.moe_prefix + "experts." + std::to_string(e) + "." +
                                         fam.expert_names[projection] + ".weight";
                out.push_back(HfTensor{base, {p.shape[1], p.shape[2]}, i, e * p.shape[1] * p.shape[2]});
            }
        };
        switch (p.role) {
            case Role::TOKEN_EMBEDDING: vocab_rows("model.embed_tokens.weight"); break;
            case Role::OUTPUT_HEAD: vocab_rows("lm_head.weight"); break;
            case Role::NORM_WEIGHT:
                if (p.block < 0) whole("model.norm.weight");
                else if (ends_with(p.name, "ln1.weight")) whole(layer + "input_layernorm.weight");
                else whole(layer + "post_attention_layernorm.weight");
                break;
            case Role::ATTN_Q: whole(layer + "self_attn.q_proj.weight"); break;
            case Role::ATTN_K: whole(layer + "self_attn.k_proj.weight"); break;
            case Role::ATTN_V: whole(layer + "self_attn.v_proj.weight"); break;
            case Role::ATTN_O: whole(layer + "self_attn.o_proj.weight"); break;
            case Role::QK_NORM_WEIGHT:
                whole(layer +
                      (ends_with(p.name, "q_norm.weight") ? "self_attn.q_norm.weight" : "self_attn.k_norm.weight"));
                break;
            case Role::ROUTER: whole(layer + fam.moe_prefix + "gate.weight"); break;
            case Role::EXPERT_W1: experts(0); break;  // gate
            case Role::EXPERT_W2: experts(1); break;  // up (Mixtral's w3)
            case Role::EXPERT_W3: experts(2); break;  // down (Mixtral's w2)
            case Role::FFN_W1: whole(layer + "mlp.gate_proj.weight"); break;
            case Role::FFN_W2: whole(layer + "mlp.up_proj.weight"); break;
            case Role::FFN_W3: whole(layer + "mlp.down_proj.weight"); break;
            default:
                fail("{}: parameter '{}' ({}) has no tensor in a {} checkpoint", "hf", p.name, choice_name(p.role),
                     fam.architecture);
        }
    }
    return out;
}

}  // namespace skew::hf
