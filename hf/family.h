// The Hugging Face model families skew reads and writes (docs/huggingface.md): Mixtral, OLMoE and
// Qwen3-MoE, told apart by config.json's `architectures` on import and by the model section's
// QK-norm on export (none: Mixtral, full: OLMoE, per_head: Qwen3-MoE).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "engine/config.h"

namespace skew::hf {

enum class Family : uint8_t { MIXTRAL, OLMOE, QWEN3_MOE };

/// The class name config.json's `architectures` holds: "MixtralForCausalLM", "OlmoeForCausalLM",
/// "Qwen3MoeForCausalLM".
const char* family_architecture(Family f);
/// config.json's `model_type`: "mixtral", "olmoe", "qwen3_moe".
const char* family_model_type(Family f);
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
