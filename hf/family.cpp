// The three Hugging Face families and how a config.json or a skew model section picks one
// (docs/huggingface.md, "Families").
#include "hf/family.h"

#include "engine/error.h"

namespace skew::hf {

namespace {
constexpr Family ALL[] = {Family::MIXTRAL, Family::OLMOE, Family::QWEN3_MOE};
}

const char* family_architecture(Family f) {
    switch (f) {
        case Family::MIXTRAL: return "MixtralForCausalLM";
        case Family::OLMOE: return "OlmoeForCausalLM";
        case Family::QWEN3_MOE: return "Qwen3MoeForCausalLM";
    }
    return "?";
}

const char* family_model_type(Family f) {
    switch (f) {
        case Family::MIXTRAL: return "mixtral";
        case Family::OLMOE: return "olmoe";
        case Family::QWEN3_MOE: return "qwen3_moe";
    }
    return "?";
}

std::string supported_architectures() {
    std::string out;
    for (Family f : ALL) out += (out.empty() ? "" : ", ") + std::string(family_architecture(f));
    return out;
}

Family family_of_hf_config(const nlohmann::json& config, const std::string& source) {
    if (!config.is_object()) fail("{}: not a JSON object", source);
    if (!config.contains("architectures"))
        fail("{}: no `architectures` field; skew imports {}", source, supported_architectures());
    const nlohmann::json& a = config["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
        fail("{}: architectures {} is not a list of one class name; skew imports {}", source, a.dump(),
             supported_architectures());
    const std::string name = a[0].get<std::string>();
    for (Family f : ALL) {
        if (name != family_architecture(f)) continue;
        if (config.contains("model_type") &&
            (!config["model_type"].is_string() || config["model_type"].get<std::string>() != family_model_type(f)))
            fail("{}: model_type {} does not match architectures [{}] (expected \"{}\")", source,
                 config["model_type"].dump(), name, family_model_type(f));
        return f;
    }
    fail("{}: architectures [{}] is not supported; skew imports {}", source, name, supported_architectures());
}

Family family_of_model(const ModelConfig& m, const std::string& source) {
    auto refuse = [&](const char* key, const std::string& why) {
        fail("{}: model.{} {}: no Hugging Face family skew writes ({}) has it", source, key, why,
             supported_architectures());
    };
    if (m.positions != Positions::ROPE) refuse("positions", "is learned (a position table)");
    if (m.norm != NormKind::RMSNORM) refuse("norm", "is layernorm");
    if (m.attention_bias) refuse("attention_bias", "is true (q, k, v biases without an o bias)");
    if (m.n_shared_experts > 0) refuse("n_shared_experts", fmt::format("is {}", m.n_shared_experts));
    const Family f = m.qk_norm == QkNorm::FULL       ? Family::OLMOE
                     : m.qk_norm == QkNorm::PER_HEAD ? Family::QWEN3_MOE
                                                     : Family::MIXTRAL;
    if (f != Family::QWEN3_MOE && int64_t(m.moe_blocks.size()) != m.n_blocks)
        fail(
            "{}: model.moe_blocks lists {} of {} blocks: {} has an MoE in every block (dense blocks: Qwen3-MoE's "
            "mlp_only_layers, which needs model.qk_norm: per_head)",
            source, m.moe_blocks.size(), m.n_blocks, family_architecture(f));
    if (f == Family::MIXTRAL && !m.normalize_top_k)
        fail(
            "{}: model.normalize_top_k is false: MixtralForCausalLM always renormalizes its top-k gates (OLMoE and "
            "Qwen3-MoE do not need to: model.qk_norm full or per_head)",
            source);
    if (f == Family::MIXTRAL && m.top_k == 1)
        fail(
            "{}: model.top_k is 1: skew gates top-1 by the router probability, MixtralForCausalLM renormalizes it "
            "to 1",
            source);
    return f;
}

}  // namespace skew::hf
