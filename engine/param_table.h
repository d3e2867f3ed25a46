// The one parameter table (docs/design.md, "One parameter table"): every parameter of the model with
// its HF-style name, shape, dtype, tier and role. The memory plan, arena layout, optimizer tiers,
// checkpoint names and Muon's routing all read it; nothing re-derives tiers from shapes elsewhere.
// Parameter counts for the paper's config: paper Appendix B.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/choice_names.h"

namespace skew {

struct ModelConfig;

enum class DType : uint8_t { BF16, F32, I32, U16 };
/// The optimizer tiers (docs/design.md, "Optimizers"). SHARED_EXPERTS holds the shared experts of
/// the MoE blocks (model.n_shared_experts): dense matrices every token reaches, as the backbone's,
/// that sit beside the routed experts; their policy defaults to the backbone's
/// (docs/architectures.md, "Tensor roles and the tier policy"). The value indexes OptimizerConfig::tiers.
enum class Tier : uint8_t { BACKBONE, EXPERTS, ROUTER, SHARED_EXPERTS };
constexpr int N_TIERS = 4;
enum class Role : uint8_t {
    TOKEN_EMBEDDING,     // (padded_vocab_size, d_model), the LM head too unless untied
    POSITION_EMBEDDING,  // (max_seq_len, d_model)
    NORM_WEIGHT,         // LayerNorm or RMSNorm gain (d_model), fp32
    NORM_BIAS,           // LayerNorm bias (d_model), fp32 (RMSNorm has none)
    ATTN_Q,              // (n_heads*head_dim, d_model)
    ATTN_K,              // (n_kv_heads*head_dim, d_model)
    ATTN_V,              // (n_kv_heads*head_dim, d_model)
    ATTN_O,              // (d_model, n_heads*head_dim)
    FFN_W1,              // dense SwiGLU gate projection (d_ff, d_model)
    FFN_W2,              // dense SwiGLU up projection (d_ff, d_model)
    FFN_W3,              // dense SwiGLU down projection (d_model, d_ff)
    ROUTER,              // (n_experts, d_model), fp32
    EXPERT_W1,           // (n_experts, d_expert, d_model)
    EXPERT_W2,           // (n_experts, d_expert, d_model)
    EXPERT_W3,           // (n_experts, d_model, d_expert)
    OUTPUT_HEAD,         // (padded_vocab_size, d_model): the untied LM head (model.tie_embeddings false)
    QK_NORM_WEIGHT,  // RMSNorm gain of q or k (model.qk_norm), fp32: full (n_heads*head_dim) or (n_kv_heads*head_dim); per_head (head_dim)
    ATTN_BIAS,         // bias of the q, k or v projection (model.attention_bias), fp32 (its projection's out_features)
    SHARED_EXPERT_W1,  // (d_shared, d_model): the shared experts' gate projections, stacked as one SwiGLU
    SHARED_EXPERT_W2,  // (d_shared, d_model): their up projections
    SHARED_EXPERT_W3,  // (d_model, d_shared): their down projections
    SHARED_EXPERT_GATE,  // (d_model) fp32: w_gate of sigmoid(x · w_gate) (model.shared_expert_gate: sigmoid)
};

/// The names of dtypes, tiers and roles in plans, logs and messages (engine/choice_names.h).
template <>
struct ChoiceNames<DType> {
    static constexpr std::array<std::pair<DType, std::string_view>, 4> items{
        {{DType::BF16, "bf16"}, {DType::F32, "fp32"}, {DType::I32, "int32"}, {DType::U16, "uint16"}}};
};
template <>
struct ChoiceNames<Tier> {
    static constexpr std::array<std::pair<Tier, std::string_view>, 4> items{{{Tier::BACKBONE, "backbone"},
                                                                             {Tier::EXPERTS, "experts"},
                                                                             {Tier::ROUTER, "router"},
                                                                             {Tier::SHARED_EXPERTS, "shared_experts"}}};
};
template <>
struct ChoiceNames<Role> {
    static constexpr std::array<std::pair<Role, std::string_view>, 22> items{
        {{Role::TOKEN_EMBEDDING, "token_embedding"},
         {Role::POSITION_EMBEDDING, "position_embedding"},
         {Role::NORM_WEIGHT, "norm_weight"},
         {Role::NORM_BIAS, "norm_bias"},
         {Role::ATTN_Q, "attn_q"},
         {Role::ATTN_K, "attn_k"},
         {Role::ATTN_V, "attn_v"},
         {Role::ATTN_O, "attn_o"},
         {Role::FFN_W1, "ffn_w1"},
         {Role::FFN_W2, "ffn_w2"},
         {Role::FFN_W3, "ffn_w3"},
         {Role::ROUTER, "router"},
         {Role::EXPERT_W1, "expert_w1"},
         {Role::EXPERT_W2, "expert_w2"},
         {Role::EXPERT_W3, "expert_w3"},
         {Role::OUTPUT_HEAD, "output_head"},
         {Role::QK_NORM_WEIGHT, "qk_norm_weight"},
         {Role::ATTN_BIAS, "attn_bias"},
         {Role::SHARED_EXPERT_W1, "shared_expert_w1"},
         {Role::SHARED_EXPERT_W2, "shared_expert_w2"},
         {Role::SHARED_EXPERT_W3, "shared_expert_w3"},
         {Role::SHARED_EXPERT_GATE, "shared_expert_gate"}}};
};

/// Bytes per element of a dtype.
int64_t dtype_bytes(DType t);

/// One parameter tensor. Expert banks are stored stacked (n_experts, rows, cols) but every
/// optimizer treats each expert matrix as its own W (docs/design.md, "Optimizers"): `n_matrices()`
/// is n_experts for a bank, 1 for any other matrix, 0 for a vector.
struct ParamInfo {
    std::string name;            // HF-style, e.g. "blocks.1.moe.experts.w1"
    std::vector<int64_t> shape;  // row-major; a linear weight is (out_features, in_features)
    DType dtype;
    Tier tier;
    Role role;
    int block = -1;      // transformer block index, -1 for embeddings and final norm
    uint32_t index = 0;  // position in the table (stable id for RNG keys and checkpoints)
    /// Expert banks under expert parallelism (docs/distributed.md, "Expert parallel"): the global
    /// index of the first expert this rank holds (shape[0] experts from here on). 0 otherwise.
    int64_t expert_offset = 0;

    int64_t numel() const;
    int64_t bytes() const { return numel() * dtype_bytes(dtype); }
    bool is_vector() const { return shape.size() == 1; }
    /// Rows and columns of each matrix (last two dims); vectors: rows = numel, cols = 1.
    int64_t rows() const;
    int64_t cols() const;
    /// Number of independent matrices (experts in a bank), 1 for a plain matrix, 0 for a vector.
    int64_t n_matrices() const;
    /// The global element index of local element 0: expert_offset * rows * cols for an expert
    /// bank, 0 for every other tensor. Every Philox key that depends on an element index (init,
    /// rounding noise, GaLore's test matrix) adds it, so a rank's shard draws what one process does.
    int64_t element_offset() const { return shape.size() == 3 ? expert_offset * rows() * cols() : 0; }
};

/// Whether `p` is a stacked expert bank (Role EXPERT_W1/W2/W3, shape (n_experts, rows, cols)): the
/// one test of it for ZeRO ownership by whole experts, expert-parallel sharding, deferred expert
/// gradients (no stored gradient buffer) and idle-expert skipping (docs/design.md "One parameter table").
bool is_expert_bank(const ParamInfo& p);

/// The parameter table of a model config, in a fixed order (embeddings, blocks, final norm).
struct ParamTable {
    std::vector<ParamInfo> params;

    int64_t total_numel() const;
    int64_t tier_numel(Tier t) const;
    /// Parameters touched per token (experts counted top_k / n_experts), for 6*N FLOP estimates.
    int64_t active_numel(int64_t top_k, int64_t n_experts) const;
    const ParamInfo* find(const std::string& name) const;
};

/// Build the table from a validated model config. Shapes and dtypes: docs/design.md, "The paper's model".
ParamTable build_param_table(const ModelConfig& model);

/// One rank's share of every expert bank under expert parallelism (parallel.expert = M): rank
/// `expert_rank` in [0, expert_parallel) holds experts [expert_rank * E/M, (expert_rank + 1) * E/M).
struct ExpertShard {
    int64_t expert_parallel = 1;  // M
    int64_t expert_rank = 0;      // this rank's position in its expert-parallel group
};

/// The table of one expert-parallel rank (docs/distributed.md, "Expert parallel"): the expert banks
/// hold n_experts / M experts, shape (E/M, rows, cols), with ParamInfo::expert_offset the global
/// index of the first; every other parameter, name and index as build_param_table(model). M = 1 is
/// build_param_table(model). Errors (skew::Error naming the key): M < 1, M not dividing n_experts,
/// expert_rank outside [0, M), or d_model x d_expert not a multiple of 4 when M > 1 (the rounding
/// noise is drawn four elements per Philox block, so a shard must start on a block).
ParamTable build_param_table(const ModelConfig& model, const ExpertShard& shard);

}  // namespace skew
