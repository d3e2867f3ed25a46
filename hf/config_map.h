// config.json <-> skew's model section for the three Hugging Face families (docs/huggingface.md,
// "config.json"): the published field names, the fields skew cannot represent refused by name, and
// the model section as the YAML `skew import` writes and `skew plan --hf` reads.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "engine/config.h"
#include "hf/family.h"

namespace skew::hf {

/// Read and parse config.json at `path` (strict JSON: no duplicate keys). Throws skew::Error naming it.
nlohmann::json read_hf_config(const std::string& path);

/// The skew model section of a config.json of family `f`: hidden_size -> d_model, num_hidden_layers ->
/// n_blocks, num_attention_heads / num_key_value_heads -> n_heads / n_kv_heads, head_dim (0 when absent
/// or hidden_size / heads), the expert width (intermediate_size; Qwen3-MoE moe_intermediate_size) ->
/// d_expert, num_local_experts (Mixtral) or num_experts -> n_experts, num_experts_per_tok -> top_k,
/// norm_topk_prob (Mixtral: always) -> normalize_top_k, vocab_size -> vocab_size with padded_vocab_size
/// the next multiple of 64, max_position_embeddings -> max_seq_len, rope_theta, rms_norm_eps ->
/// norm_eps, tie_word_embeddings, router_aux_loss_coef -> balance_loss_coef, initializer_range ->
/// init_std; RoPE, RMSNorm, the family's QK-norm, no router noise, no z-loss. Qwen3-MoE's dense blocks
/// (mlp_only_layers, decoder_sparse_step) are blocks outside model.moe_blocks of width intermediate_size.
/// Throws skew::Error naming `source` and the field: a required field missing or of the wrong type,
/// and every value skew cannot represent (rope_scaling, a sliding window in use, hidden_act other than
/// silu, attention_bias, clip_qkv, attention_dropout, router_jitter_noise, top-1 renormalized).
ModelConfig model_config_from_hf(const nlohmann::json& config, Family f, const std::string& source);

/// config.json of family `f` for model `m`, with the fields as the published checkpoints spell them
/// (the inverse of model_config_from_hf; vocab_size is m.vocab_size, the unpadded rows; torch_dtype
/// bfloat16). `m` must be representable (family_of_model).
nlohmann::json hf_config_from_model(const ModelConfig& m, Family f);

/// The model section as YAML ("model:\n  d_model: 32\n..."), every key of the schema at its value
/// (`moe_blocks: all` when every block routes), numbers in shortest round-trip form: what
/// load_config_text reads back to `m`.
std::string model_section_yaml(const ModelConfig& m);

/// model_section_yaml(m), plus `train: seq_len: max_seq_len` where the model's max_seq_len is below
/// train.seq_len's default (a config must train sequences the model holds), and `runtime: backend:
/// cpu` where model.head_dim is a width the CUDA attention kernels do not take
/// (attention_head_dim_supported; the CPU takes any): the config.yaml `skew import` writes, which
/// loads with every other key at its default.
std::string config_yaml(const ModelConfig& m);

/// config_yaml(m) loaded: every other section at its defaults, loaded and validated by skew's own
/// rules (load_config_text; `source` names it in errors), with `overrides` (--set) applied.
Config config_from_model(const ModelConfig& m, const std::string& source,
                         const std::vector<std::string>& overrides = {});

/// The config of a published model for `skew plan --hf PATH`: PATH is a checkpoint folder (its
/// config.json) or a config.json itself; its family's model section (model_config_from_hf) with every
/// other section at its defaults and `overrides` (--set) applied. Throws skew::Error naming the file.
Config config_from_hf_path(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace skew::hf
