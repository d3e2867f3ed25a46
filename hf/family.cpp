// The three Hugging Face families as one table, and how a config.json or a skew model section picks
// a row (docs/huggingface.md, "Families").
#include "hf/family.h"

#include <array>

#include "engine/error.h"

namespace skew::hf {

namespace {

const std::array<FamilySpec, 3>& families() {
    static const std::array<FamilySpec, 3> rows = {{
        {Family::MIXTRAL,
         "MixtralForCausalLM",
         "mixtral",
         QkNorm::NONE,
         "num_local_experts",
         "intermediate_size",
         false,
         true,
         0.001,
         "block_sparse_moe.",
         {"w1", "w3", "w2"},
         {{"sliding_window", nullptr, "skew's attention is full causal; only sliding_window null"},
          {"router_jitter_noise", 0.0, "skew's router noise is additive N(0, std^2), not Mixtral's jitter"}}},
        {Family::OLMOE,
         "OlmoeForCausalLM",
         "olmoe",
         QkNorm::FULL,
         "num_experts",
         "intermediate_size",
         false,
         false,
         0.01,
         "mlp.",
         {"gate_proj", "up_proj", "down_proj"},
         {{"attention_bias", false, "skew's attention biases are q, k and v only, without o_proj's"},
          {"clip_qkv", nullptr, "skew does not clamp q, k and v"}}},
        {Family::QWEN3_MOE,
         "Qwen3MoeForCausalLM",
         "qwen3_moe",
         QkNorm::PER_HEAD,
         "num_experts",
         "moe_intermediate_size",
         true,
         false,
         0.001,
         "mlp.",
         {"gate_proj", "up_proj", "down_proj"},
         {{"attention_bias", false, "skew's attention biases are q, k and v only, without o_proj's"},
          {"use_sliding_window", false, "skew's attention is full causal; only use_sliding_window false"}}},
    }};
    return rows;
}

}  // namespace

const FamilySpec& family_spec(Family f) {
    for (const FamilySpec& s : families())
        if (s.family == f) return s;
    fail("hf: family {} has no row", int(f));
}

const char* family_architecture(Family f) { return family_spec(f).architecture; }

std::string supported_architectures() {
    std::string out;
    for (const FamilySpec& s : families()) out += (out.empty() ? "" : ", ") + std::string(s.architecture);
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
    for (const FamilySpec& s : families()) {
        if (name != s.architecture) continue;
        if (config.contains("model_type") &&
            (!config["model_type"].is_string() || config["model_type"].get<std::string>() != s.model_type))
            fail("{}: model_type {} does not match architectures [{}] (expected \"{}\")", source,
                 config["model_type"].dump(), name, s.model_type);
        return s.family;
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
    const FamilySpec* spec = nullptr;
    for (const FamilySpec& s : families())
        if (s.qk_norm == m.qk_norm) spec = &s;
    if (spec == nullptr) refuse("qk_norm", "has no family");
    if (!spec->dense_blocks && int64_t(m.moe_blocks.size()) != m.n_blocks)
        fail(
            "{}: model.moe_blocks lists {} of {} blocks: {} has an MoE in every block (dense blocks: Qwen3-MoE's "
            "mlp_only_layers, which needs model.qk_norm: per_head)",
            source, m.moe_blocks.size(), m.n_blocks, spec->architecture);
    if (spec->renormalizes_top_k && !m.normalize_top_k)
        fail(
            "{}: model.normalize_top_k is false: {} always renormalizes its top-k gates (OLMoE and "
            "Qwen3-MoE do not need to: model.qk_norm full or per_head)",
            source, spec->architecture);
    if (spec->renormalizes_top_k && m.top_k == 1)
        fail(
            "{}: model.top_k is 1: skew gates top-1 by the router probability, {} renormalizes it "
            "to 1",
            source, spec->architecture);
    return spec->family;
}

}  // namespace skew::hf
