// Hugging Face tensor names <-> skew's parameter table (docs/huggingface.md, "Tensors"): every tensor
// of a family's checkpoint as a contiguous slice of one skew parameter, so import and export copy
// bytes without reshaping: an expert of a stacked bank (skew stores experts stacked, the checkpoints
// one tensor per expert), or the first vocab_size rows of a padded embedding or LM head.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/param_table.h"
#include "hf/family.h"

namespace skew::hf {

/// One tensor of a Hugging Face checkpoint and where it lies in skew's parameter.
struct HfTensor {
    std::string name;            // e.g. "model.layers.0.block_sparse_moe.experts.3.w2.weight"
    std::vector<int64_t> shape;  // as the checkpoint stores it, (out_features, in_features)
    size_t param = 0;            // index into ParamTable::params
    int64_t offset = 0;          // first element inside the parameter (row-major)
    int64_t numel() const;
};

/// Every tensor of family `f`'s checkpoint of model `m` (whose table is `table`), in table order:
/// model.embed_tokens.weight (vocab_size rows of embed.tokens), per layer input_layernorm and
/// post_attention_layernorm (ln1, ln2), self_attn.{q,k,v,o}_proj (attn.wq, wk, wv, wo), self_attn.q_norm
/// and k_norm (OLMoE, Qwen3-MoE), the router (Mixtral block_sparse_moe.gate, else mlp.gate) and
/// per expert e the gate, up and down projections: Mixtral block_sparse_moe.experts.e.w1 (gate: expert e
/// of moe.experts.w1), w3 (up: of moe.experts.w2) and w2 (down: of moe.experts.w3); OLMoE and Qwen3-MoE
/// mlp.experts.e.gate_proj, up_proj, down_proj (of w1, w2, w3); Qwen3-MoE's dense layers mlp.gate_proj,
/// up_proj, down_proj (ffn.w1, w2, w3); model.norm (final_ln) and lm_head (untied; vocab_size rows).
/// Throws skew::Error naming a parameter no family has (family_of_model refuses such models first).
std::vector<HfTensor> hf_tensors(Family f, const ModelConfig& m, const ParamTable& table);

}  // namespace skew::hf
