// The Hugging Face model families skew reads and writes (docs/huggingface.md, "Families"): Mixtral,
// OLMoE and Qwen3-MoE, one row each of one table (family_spec) holding everything that tells them
// apart: config.json's field names, the options each fixes, its tensor names. Import picks the row by
// config.json's `architectures`, export by the model section's QK-norm.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"

namespace skew::hf {

enum class Family : uint8_t { MIXTRAL, OLMOE, QWEN3_MOE };

/// A config.json field skew has no counterpart for: import refuses any value but `off` (absent and
/// null are taken), naming `why`; export writes `off`.
struct OffField {
    const char* key;
    nlohmann::json off;
    const char* why;
};

/// One family's row: what its config.json and checkpoint call things and which of skew's model
/// options it fixes (docs/huggingface.md, "Families", "config.json", "Tensors").
struct FamilySpec {
    Family family;
    const char* architecture;     // config.json `architectures`: "MixtralForCausalLM", ...
    const char* model_type;       // config.json `model_type`: "mixtral", "olmoe", "qwen3_moe"
    QkNorm qk_norm;               // the block's QK-norm: none, full (OLMoE), per_head (Qwen3-MoE)
    const char* n_experts_key;    // "num_local_experts" (Mixtral) or "num_experts"
    const char* d_expert_key;     // "intermediate_size", or "moe_intermediate_size" beside a dense MLP's
    bool dense_blocks;            // mlp_only_layers and decoder_sparse_step, a dense MLP of intermediate_size
    bool renormalizes_top_k;      // always renormalizes the top-k gates, no norm_topk_prob (Mixtral)
    double balance_loss_coef;     // router_aux_loss_coef where config.json gives none
    const char* moe_prefix;       // the MoE block's tensor prefix in a layer: "block_sparse_moe." or "mlp."
    const char* expert_names[3];  // expert e's gate, up and down projections: w1 w3 w2, or *_proj
    std::vector<OffField> off_fields;
};

/// The row of family `f`.
const FamilySpec& family_spec(Family f);

/// The class name config.json's `architectures` holds: "MixtralForCausalLM", "OlmoeForCausalLM",
/// "Qwen3MoeForCausalLM".
const char* family_architecture(Family f);
/// "MixtralForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM": for messages.
std::string supported_architectures();

/// The family of a config.json (`architectures`, one entry; `model_type`, where given, must be the
/// family's). Throws skew::Error naming `source`, the value and the supported architectures.
Family family_of_hf_config(const nlohmann::json& config, const std::string& source);

/// The family that represents a skew model section, for `skew export --format hf`. Throws
/// skew::Error naming the first key no family represents (model.positions learned, model.norm
/// layernorm, model.attention_bias, model.n_shared_experts, dense blocks in model.moe_blocks outside
/// Qwen3-MoE, model.normalize_top_k false or top-1 for Mixtral), prefixed by `source`.
Family family_of_model(const ModelConfig& m, const std::string& source);

}  // namespace skew::hf
