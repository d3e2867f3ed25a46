// The experiment config: YAML with sections model, optimizers, data, train, runtime, loaded with
// strict validation (unknown keys with a suggestion, duplicated keys, types, ranges, cross-field
// rules) and command-line overrides (--set key=value) held to the same rules.
// The schema (every key, type, default, meaning) lives in config_schema.cpp; the config reference
// (docs/config-reference.md) is generated from it (`skew config --reference`).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config_choices.h"
#include "engine/param_table.h"  // Tier indexes OptimizerConfig::tiers

namespace skew {

/// Model shape and MoE settings. Defaults reproduce the paper (Appendix A).
struct ModelConfig {
    int64_t vocab_size = 50257;         // GPT-2 BPE tokens
    int64_t padded_vocab_size = 50304;  // embedding rows (multiple of 64 for the GEMMs)
    int64_t d_model = 4096;
    int64_t n_blocks = 2;
    std::vector<int64_t> moe_blocks = {1};  // indices of blocks whose FFN is an MoE layer
    bool moe_blocks_all = false;            // `moe_blocks: all` was given: the loader fills moe_blocks with every block
    int64_t n_heads = 32;
    int64_t n_kv_heads = 8;
    int64_t d_ff = 4096;        // dense SwiGLU hidden width
    int64_t max_seq_len = 256;  // learned positions
    int64_t n_experts = 128;
    int64_t d_expert = 4096;  // expert SwiGLU hidden width
    int64_t top_k = 2;
    int64_t n_shared_experts = 0;  // always-on SwiGLU experts beside the routed ones in every MoE block
    int64_t d_shared_expert = 0;   // hidden width of each shared expert; 0: d_expert
    SharedExpertGate shared_expert_gate = SharedExpertGate::NONE;  // sigmoid: scaled by sigmoid(x · w_gate) per token
    bool normalize_top_k = true;      // top_k > 1: the chosen probabilities renormalized to sum 1 (OLMoE: false)
    double router_noise_std = 0.5;    // N(0, std^2) added to router logits in training
    double balance_loss_coef = 0.05;  // Switch balance loss alpha
    double z_loss_coef = 1e-4;        // ST-MoE router z-loss
    double init_std = 0.02;
    double norm_eps = 1e-5;                    // the normalization's epsilon (LayerNorm or RMSNorm)
    Positions positions = Positions::LEARNED;  // learned embeddings, or RoPE on q and k
    double rope_theta = 10000.0;               // RoPE base: lane pair i turns by theta^(-2i/head_dim) per position
    NormKind norm = NormKind::LAYERNORM;       // pre-norm of every block and the final norm
    bool tie_embeddings = true;                // the LM head is the token embedding (else its own lm_head weight)
    int64_t head_dim_key = 0;                  // model.head_dim as given; 0: d_model / n_heads (head_dim())
    QkNorm qk_norm = QkNorm::NONE;             // RMSNorm of q and k before RoPE: none | full (OLMoE) | per_head (Qwen3)
    bool attention_bias = false;               // q, k and v projections with biases (Qwen2)

    /// Lanes per attention head: model.head_dim when given, else d_model / n_heads.
    int64_t head_dim() const { return head_dim_key > 0 ? head_dim_key : d_model / n_heads; }
    bool is_moe_block(int64_t b) const;
    /// Hidden width of the shared experts of an MoE block, stored as one SwiGLU:
    /// n_shared_experts x (d_shared_expert, or d_expert when 0); 0 without shared experts.
    int64_t d_shared() const { return n_shared_experts * (d_shared_expert > 0 ? d_shared_expert : d_expert); }
};

/// What one tier keeps (docs/design.md, "Optimizers"): momentum, second moment, weight decay.
/// Vectors always get a full second moment where the policy says factored (Algorithm 1 line 2).
struct TierPolicy {
    MomentumKind momentum = MomentumKind::NONE;
    SecondMomentKind second_moment = SecondMomentKind::FACTORED;
    double weight_decay = 0.0;
};

/// One optimizer run: the `optimizers.<name>` section, defaults from its type.
/// type is one of ChoiceNames<OptimizerType> (engine/config_choices.h).
struct OptimizerConfig {
    std::string name;                              // key in the optimizers section, e.g. "skewadam-expert-momentum"
    OptimizerType type = OptimizerType::SKEWADAM;  // the algorithm
    double lr = 3e-4;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 0.05;  // backbone and experts; the router is never decayed by default
    Rounding rounding = Rounding::STOCHASTIC;
    WeightDecayMode weight_decay_mode = WeightDecayMode::FUSED;
    std::array<TierPolicy, 4> tiers{};  // indexed by Tier (SkewAdam family only)
    double update_clip = 1.0;           // update RMS clip threshold (SkewAdam, Adafactor)
    // Muon
    double muon_momentum = 0.95;
    int64_t ns_steps = 3;
    bool nesterov = false;
    bool shape_scale = false;   // multiply by sqrt(max(1, rows/cols)) (Keller Jordan)
    bool ema_momentum = false;  // B <- lerp(B, G, 1-mu) instead of the paper's sum form
    double adam_lr = 1e-3;      // internal Adam lr, scaled by lr_t / lr
    // Adafactor
    double decay_rate = -0.8;  // beta2_t = 1 - t^decay_rate
    double eps1 = 1e-30;
    // GaLore
    int64_t rank = 128;
    int64_t update_proj_gap = 200;
    double galore_scale = 0.25;
};

/// Data sources and split (docs/design.md, "Data").
struct DataConfig {
    std::string dir = "data/prepared";  // token shards + manifest written by `skew prepare`
    std::string tokenizer_dir = "data/tokenizer";
    std::string separator = "eot";  // eot | none (the paper's trainer)
    double val_ratio = 0.05;
};

/// The training protocol (paper Section 4, Appendix A).
struct TrainConfig {
    std::vector<std::string> optimizers = {"skewadam", "adamw", "lion", "muon"};
    int64_t steps = 10000;
    int64_t batch_size = 64;  // sequences per optimizer step
    int64_t seq_len = 128;
    int64_t microbatch = 8;  // sequences per forward/backward; 0 = the largest that fits
    double grad_clip = 1.0;  // global grad-norm clip; 0 disables
    double warmup_frac = 0.03;
    double min_lr_frac = 0.0;  // cosine decays to lr * min_lr_frac
    int64_t eval_every = 1000;
    int64_t eval_batches = 64;
    int64_t log_every = 10;
    int64_t checkpoint_every = 1000;
    int64_t max_skipped_steps = 10;  // NaN/inf steps skipped before the run stops
    int64_t seed = 42;
    IdleExperts idle_experts = IdleExperts::SKIP;  // an expert that got no token in a step: skip | step (zero gradient)
    ExpertGrads expert_grads =
        ExpertGrads::STORED;  // expert weight gradients: stored (a buffer) | deferred (into the optimizer step)
    Recompute recompute = Recompute::BLOCK;  // activation recompute in the backward: block | attention | none
    std::string init_from;                   // a `skew import` folder whose weights replace the initializer ("": none)

    int64_t grad_accum_steps() const { return microbatch > 0 ? batch_size / microbatch : 0; }
};

/// Where and how it runs.
struct RuntimeConfig {
    BackendChoice backend = BackendChoice::AUTO;  // auto | cpu | cuda
    int64_t threads = 0;                          // CPU threads; 0 = all cores
    GradDtype grad_dtype = GradDtype::BF16;       // gradient storage: bf16 (the paper) | fp32
    double workspace_gib = 0.25;                  // library workspaces (cuBLASLt) reserved in the plan
    std::string out_dir = "runs/default";
};

/// How a run spreads over ranks (docs/distributed.md). The number of ranks (world_size) comes from
/// the launcher (mpirun, srun), not from the config: the same file runs on 1 or N ranks.
struct ParallelConfig {
    int64_t expert = 1;      // expert_parallel M: ranks that split each expert bank (divides n_experts and world_size)
    int64_t zero_stage = 1;  // 1: optimizer state and update partitioned across ranks (ZeRO-1); 0: replicated
    double bucket_mib = 25.0;         // gradient reduction bucket size (MiB)
    bool overlap_grad_reduce = true;  // start each bucket's sum during the last microbatch's backward
};

struct Config {
    ModelConfig model;
    std::vector<OptimizerConfig> optimizers;          // every name of train.optimizers, resolved
    std::vector<OptimizerConfig> defined_optimizers;  // every entry of the optimizers section
    DataConfig data;
    TrainConfig train;
    RuntimeConfig runtime;
    ParallelConfig parallel;
    std::string source;         // file it was loaded from
    std::string resolved_yaml;  // the resolved config (defaults + file + overrides) as YAML

    /// The optimizer of that name among train.optimizers or the optimizers section; nullptr if none.
    const OptimizerConfig* find_optimizer(const std::string& name) const;
};

/// A command-line flag that stands for a `key=value` override (`--optimizers a,b` is
/// `train.optimizers=[a,b]`): errors about the value name `flag` (e.g. "--optimizers a,b"), not --set.
struct FlagOverride {
    std::string flag;  // the option as the user typed it
    std::string text;  // key=value
};

/// Load and validate a config file, then apply `key=value` overrides (--set, in order) and then
/// flag_overrides (each validated by the same rules). Throws skew::Error naming file, line, column
/// and key on any violation; a value from the command line is named by its option (`--set key=value`
/// or the flag), also when it breaks a rule on another key (--set model.d_model=65 against n_heads).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                   const std::vector<FlagOverride>& flag_overrides = {});

/// Same, from YAML text (`source` names it in errors).
Config load_config_text(const std::string& yaml_text, const std::string& source,
                        const std::vector<std::string>& overrides = {},
                        const std::vector<FlagOverride>& flag_overrides = {});

/// The optimizer config of a built-in name (one of builtin_optimizer_names()) with the paper's
/// defaults (docs/optimizers.md); throws skew::Error for an unknown name.
OptimizerConfig builtin_optimizer(const std::string& name);

/// All built-in optimizer names, in the paper's table order.
const std::vector<std::string>& builtin_optimizer_names();

}  // namespace skew
