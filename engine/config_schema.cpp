// The config schema table (see config_schema.h): every key, its type, range, choices, meaning,
// and the member of Config / OptimizerConfig it sets. Defaults are the structs' initializers.
#include "engine/config_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "engine/param_table.h"

namespace skew {
namespace {

constexpr double INF = std::numeric_limits<double>::infinity();

// Section keys bound to a member: the lambdas read and write one field.
#define SKEW_INT(PATH, MEMBER, MIN, MAX, DOC)                                                \
    KeySpec {                                                                                \
        PATH, KeyType::INT, MIN, MAX, false, {}, DOC,                                        \
            [](Config& c, const ConfigValue& v) { c.MEMBER = std::get<int64_t>(v); },        \
            [](const Config& c) { return ConfigValue(int64_t(c.MEMBER)); }, nullptr, nullptr \
    }
#define SKEW_FLOAT(PATH, MEMBER, MIN, MAX, MINEX, DOC)                                      \
    KeySpec {                                                                               \
        PATH, KeyType::FLOAT, MIN, MAX, MINEX, {}, DOC,                                     \
            [](Config& c, const ConfigValue& v) { c.MEMBER = std::get<double>(v); },        \
            [](const Config& c) { return ConfigValue(double(c.MEMBER)); }, nullptr, nullptr \
    }
#define SKEW_STRING(PATH, MEMBER, CHOICES, DOC)                                           \
    KeySpec {                                                                             \
        PATH, KeyType::STRING, -INF, INF, false, CHOICES, DOC,                            \
            [](Config& c, const ConfigValue& v) { c.MEMBER = std::get<std::string>(v); }, \
            [](const Config& c) { return ConfigValue(c.MEMBER); }, nullptr, nullptr       \
    }
// A choice key: an enum with its one name table (engine/config_choices.h).
#define SKEW_CHOICE(PATH, MEMBER, DOC)                                                                        \
    KeySpec {                                                                                                 \
        PATH, KeyType::STRING, -INF, INF, false, choice_names<decltype(Config{}.MEMBER)>(), DOC,              \
            [](Config& c, const ConfigValue& v) {                                                             \
                c.MEMBER = *parse_choice<decltype(Config{}.MEMBER)>(std::get<std::string>(v));                \
            },                                                                                                \
            [](const Config& c) { return ConfigValue(std::string(choice_name(c.MEMBER))); }, nullptr, nullptr \
    }
#define SKEW_BOOL(PATH, MEMBER, DOC)                                                      \
    KeySpec {                                                                             \
        PATH, KeyType::BOOL, -INF, INF, false, {}, DOC,                                   \
            [](Config& c, const ConfigValue& v) { c.MEMBER = std::get<bool>(v); },        \
            [](const Config& c) { return ConfigValue(bool(c.MEMBER)); }, nullptr, nullptr \
    }

#define SKEW_OPT_FLOAT(PATH, MEMBER, MIN, MAX, MINEX, DOC)                                    \
    KeySpec {                                                                                 \
        PATH, KeyType::FLOAT, MIN, MAX, MINEX, {}, DOC, nullptr, nullptr,                     \
            [](OptimizerConfig& o, const ConfigValue& v) { o.MEMBER = std::get<double>(v); }, \
            [](const OptimizerConfig& o) { return ConfigValue(double(o.MEMBER)); }            \
    }
#define SKEW_OPT_INT(PATH, MEMBER, MIN, MAX, DOC)                                              \
    KeySpec {                                                                                  \
        PATH, KeyType::INT, MIN, MAX, false, {}, DOC, nullptr, nullptr,                        \
            [](OptimizerConfig& o, const ConfigValue& v) { o.MEMBER = std::get<int64_t>(v); }, \
            [](const OptimizerConfig& o) { return ConfigValue(int64_t(o.MEMBER)); }            \
    }
#define SKEW_OPT_BOOL(PATH, MEMBER, DOC)                                                    \
    KeySpec {                                                                               \
        PATH, KeyType::BOOL, -INF, INF, false, {}, DOC, nullptr, nullptr,                   \
            [](OptimizerConfig& o, const ConfigValue& v) { o.MEMBER = std::get<bool>(v); }, \
            [](const OptimizerConfig& o) { return ConfigValue(bool(o.MEMBER)); }            \
    }
#define SKEW_OPT_CHOICE(PATH, MEMBER, DOC)                                                                         \
    KeySpec {                                                                                                      \
        PATH, KeyType::STRING, -INF, INF, false, choice_names<decltype(OptimizerConfig{}.MEMBER)>(), DOC, nullptr, \
            nullptr,                                                                                               \
            [](OptimizerConfig& o, const ConfigValue& v) {                                                         \
                o.MEMBER = *parse_choice<decltype(OptimizerConfig{}.MEMBER)>(std::get<std::string>(v));            \
            },                                                                                                     \
            [](const OptimizerConfig& o) { return ConfigValue(std::string(choice_name(o.MEMBER))); }               \
    }

// A key whose upper end is open (the interval is [min, max) or (min, max)).
KeySpec open_max(KeySpec k) {
    k.max_exclusive = true;
    return k;
}

KeySpec tier_key(Tier tier, const std::string& field) {
    const std::string tname(choice_name(tier));
    const int ti = int(tier);
    // the shared experts' tier exists in models with model.n_shared_experts > 0
    const std::string note = tier == Tier::SHARED_EXPERTS
                                 ? " (the shared experts of model.n_shared_experts; default: the backbone tier's)"
                                 : "";
    KeySpec k;
    k.path = "tiers." + tname + "." + field;
    if (field == "momentum") {
        k.type = KeyType::STRING;
        k.choices = choice_names<MomentumKind>();
        k.doc = "SkewAdam family: momentum kept for the " + tname + " tier (fp32 buffer or none)" + note;
        k.set_opt = [ti](OptimizerConfig& o, const ConfigValue& v) {
            o.tiers[ti].momentum = *parse_choice<MomentumKind>(std::get<std::string>(v));
        };
        k.get_opt = [ti](const OptimizerConfig& o) {
            return ConfigValue(std::string(choice_name(o.tiers[ti].momentum)));
        };
    } else if (field == "second_moment") {
        k.type = KeyType::STRING;
        k.choices = choice_names<SecondMomentKind>();
        k.doc = "SkewAdam family: second moment of the " + tname +
                " tier (full, factored row/column, none); vectors are always full" + note;
        k.set_opt = [ti](OptimizerConfig& o, const ConfigValue& v) {
            o.tiers[ti].second_moment = *parse_choice<SecondMomentKind>(std::get<std::string>(v));
        };
        k.get_opt = [ti](const OptimizerConfig& o) {
            return ConfigValue(std::string(choice_name(o.tiers[ti].second_moment)));
        };
    } else {
        k.type = KeyType::FLOAT;
        k.min = 0;
        k.max = 1;
        k.doc = "SkewAdam family: decoupled weight decay of the " + tname + " tier" + note;
        k.set_opt = [ti](OptimizerConfig& o, const ConfigValue& v) { o.tiers[ti].weight_decay = std::get<double>(v); };
        k.get_opt = [ti](const OptimizerConfig& o) { return ConfigValue(o.tiers[ti].weight_decay); };
    }
    return k;
}

}  // namespace

const std::vector<KeySpec>& section_key_specs() {
    static const std::vector<KeySpec> specs = [] {
        std::vector<KeySpec> s = {
            SKEW_INT("model.vocab_size", model.vocab_size, 1, 1 << 30, "Tokenizer vocabulary size (GPT-2 BPE: 50257)"),
            SKEW_INT("model.padded_vocab_size", model.padded_vocab_size, 1, 1 << 30,
                     "Rows of the tied embedding / LM head; padding rows are masked out of the softmax"),
            SKEW_INT("model.d_model", model.d_model, 1, 1 << 20, "Model width"),
            SKEW_INT("model.n_blocks", model.n_blocks, 1, 4096, "Transformer blocks"),
            KeySpec{"model.moe_blocks",
                    KeyType::INT_LIST,
                    0,
                    4095,
                    false,
                    {"all"},
                    "Indices of blocks whose feed-forward layer is the MoE (others: dense SwiGLU), or all (every "
                    "block: Mixtral, OLMoE, Qwen3)",
                    [](Config& c, const ConfigValue& v) {
                        c.model.moe_blocks_all =
                            std::holds_alternative<std::string>(v);  // "all": the loader fills the list
                        c.model.moe_blocks =
                            c.model.moe_blocks_all ? std::vector<int64_t>{} : std::get<std::vector<int64_t>>(v);
                    },
                    [](const Config& c) { return ConfigValue(c.model.moe_blocks); },
                    nullptr,
                    nullptr},
            SKEW_INT("model.n_heads", model.n_heads, 1, 4096,
                     "Query heads; head_dim = d_model / n_heads unless model.head_dim is given"),
            SKEW_INT("model.n_kv_heads", model.n_kv_heads, 1, 4096, "Key/value heads (GQA); must divide n_heads"),
            SKEW_INT("model.d_ff", model.d_ff, 1, 1 << 20, "Hidden width of the dense SwiGLU feed-forward"),
            SKEW_INT("model.max_seq_len", model.max_seq_len, 1, 1 << 20, "Learned positions (longest sequence)"),
            SKEW_INT("model.n_experts", model.n_experts, 1, 1 << 16, "Experts per MoE layer"),
            SKEW_INT("model.d_expert", model.d_expert, 1, 1 << 20, "Hidden width of each expert's SwiGLU"),
            SKEW_INT("model.top_k", model.top_k, 1, 1 << 16,
                     "Experts per token (top-k routing, dropless; top_k 1 gates by the router probability, as Switch "
                     "Transformer)"),
            SKEW_INT("model.n_shared_experts", model.n_shared_experts, 0, 1 << 16,
                     "Shared experts per MoE block: always-on SwiGLU experts beside the routed ones, on the same "
                     "input (DeepSeekMoE, Qwen2-MoE); stored as one SwiGLU of n_shared_experts x d_shared_expert"),
            SKEW_INT("model.d_shared_expert", model.d_shared_expert, 0, 1 << 20,
                     "Hidden width of each shared expert's SwiGLU; 0 = model.d_expert"),
            SKEW_CHOICE("model.shared_expert_gate", model.shared_expert_gate,
                        "The shared experts' output added as is (none: DeepSeekMoE), or scaled per token by "
                        "sigmoid(x . w_gate) (sigmoid: Qwen2-MoE's shared_expert_gate)"),
            SKEW_BOOL("model.normalize_top_k", model.normalize_top_k,
                      "top_k > 1: the gates are the chosen experts' probabilities renormalized to sum 1 (true: the "
                      "paper, Mixtral, Qwen3), or the probabilities themselves (false: OLMoE)"),
            SKEW_FLOAT("model.router_noise_std", model.router_noise_std, 0, 100, false,
                       "Std of the N(0, std^2) noise added to router logits in training"),
            SKEW_FLOAT("model.balance_loss_coef", model.balance_loss_coef, 0, 100, false,
                       "Switch balance-loss coefficient alpha (its floor under uniform routing)"),
            SKEW_FLOAT("model.z_loss_coef", model.z_loss_coef, 0, 100, false, "Router z-loss coefficient"),
            SKEW_FLOAT("model.init_std", model.init_std, 0, 10, true, "Std of the N(0, std^2) weight initialization"),
            SKEW_FLOAT("model.norm_eps", model.norm_eps, 0, 1, true,
                       "Normalization epsilon (LayerNorm, or RMSNorm with model.norm: rmsnorm); model.layernorm_eps "
                       "is read as this key (configs and run folders written before the rename)"),
            SKEW_CHOICE(
                "model.positions", model.positions,
                "Positions: learned embeddings (embed.positions), or rope (rotary, on q and k; no position table)"),
            SKEW_FLOAT("model.rope_theta", model.rope_theta, 0, 1e12, true,
                       "RoPE base theta: lane pair i of a head turns by theta^(-2i/head_dim) per position (Mixtral, "
                       "Qwen3: 1e6)"),
            SKEW_CHOICE("model.norm", model.norm,
                        "Block and final normalization: layernorm (with bias) or rmsnorm (weight only)"),
            SKEW_BOOL("model.tie_embeddings", model.tie_embeddings,
                      "The LM head is the token embedding (true), or a weight of its own, lm_head (false: Mixtral, "
                      "OLMoE, Qwen3)"),
            SKEW_INT(
                "model.head_dim", model.head_dim_key, 0, 4096,
                "Lanes per attention head; 0 = d_model / n_heads. Given, q is n_heads x head_dim wide (Qwen3-30B-A3B: "
                "32 x 128 over d_model 2048); 16, 32, 64 or 128 (the CUDA attention kernels), any with "
                "runtime.backend: "
                "cpu"),
            SKEW_CHOICE("model.qk_norm", model.qk_norm,
                        "RMSNorm of q and k after their projections, before RoPE: none, full (over all of q's and all "
                        "of k's lanes, one weight each: OLMoE) or per_head (over each head's head_dim lanes, one "
                        "weight of head_dim for q and one for k shared by the heads: Qwen3)"),
            SKEW_BOOL("model.attention_bias", model.attention_bias,
                      "The q, k and v projections add biases attn.bq, attn.bk, attn.bv (fp32; Qwen2); the output "
                      "projection has none"),

            SKEW_STRING("data.dir", data.dir, {}, "Folder of token shards and manifest written by `skew prepare`"),
            SKEW_STRING("data.tokenizer_dir", data.tokenizer_dir, {},
                        "Tokenizer folder: tokenizer.json, else tokenizer.model, else GPT-2's encoder.json + vocab.bpe "
                        "(or vocab.json + merges.txt)"),
            SKEW_STRING("data.separator", data.separator, (std::vector<std::string>{"eot", "none"}),
                        "Between documents: the tokenizer's end-of-text token (GPT-2: 50256), or nothing (the paper's "
                        "trainer)"),
            SKEW_FLOAT("data.val_ratio", data.val_ratio, 0, 1, true,
                       "Fraction of documents hashed into validation; must match the `skew prepare --val-ratio` "
                       "recorded in the data's manifest.json"),

            KeySpec{"train.optimizers",
                    KeyType::STRING_LIST,
                    -INF,
                    INF,
                    false,
                    {},
                    "Optimizers trained in turn from one initialization on identical batches (names: built-ins or keys "
                    "of `optimizers`)",
                    [](Config& c, const ConfigValue& v) { c.train.optimizers = std::get<std::vector<std::string>>(v); },
                    [](const Config& c) { return ConfigValue(c.train.optimizers); },
                    nullptr,
                    nullptr},
            SKEW_INT("train.steps", train.steps, 1, 1e12, "Optimizer steps per optimizer"),
            SKEW_INT("train.batch_size", train.batch_size, 1, 1 << 24, "Sequences per optimizer step"),
            SKEW_INT("train.seq_len", train.seq_len, 1, 1 << 20, "Tokens per sequence (<= model.max_seq_len)"),
            SKEW_INT("train.microbatch", train.microbatch, 0, 1 << 24,
                     "Sequences per forward/backward (must divide batch_size); 0 = the largest that fits the device"),
            SKEW_FLOAT("train.grad_clip", train.grad_clip, 0, 1e30, false, "Global grad-norm clip; 0 disables"),
            SKEW_FLOAT("train.warmup_frac", train.warmup_frac, 0, 1, false, "Linear warmup as a fraction of steps"),
            SKEW_FLOAT("train.min_lr_frac", train.min_lr_frac, 0, 1, false,
                       "Cosine schedule floor as a fraction of lr"),
            SKEW_INT("train.eval_every", train.eval_every, 1, 1e12, "Steps between validation evaluations"),
            SKEW_INT("train.eval_batches", train.eval_batches, 1, 1 << 24, "Fixed validation batches per evaluation"),
            SKEW_INT("train.log_every", train.log_every, 1, 1e12, "Steps between log lines"),
            SKEW_INT("train.checkpoint_every", train.checkpoint_every, 1, 1e12, "Steps between checkpoints"),
            SKEW_INT("train.max_skipped_steps", train.max_skipped_steps, 0, 1e12,
                     "Steps with NaN/inf loss or gradient skipped before the run stops"),
            SKEW_INT("train.seed", train.seed, 0, 9.2e18, "Seed of every random stream (init, router noise, rounding)"),
            SKEW_CHOICE("train.idle_experts", train.idle_experts,
                        "An expert that got no token in a step: skip (weights and state untouched, the paper's "
                        "trainer) or step it with a zero gradient"),
            SKEW_CHOICE("train.expert_grads", train.expert_grads,
                        "Expert weight gradients: stored (one gradient buffer per expert bank) or deferred (the "
                        "backward keeps each expert's input rows and output gradients; the optimizer step forms one "
                        "expert's dW at a time; not GaLore)"),
            SKEW_CHOICE(
                "train.recompute", train.recompute,
                "Activation recompute in the backward: block (keep each block's input, recompute the whole block; the "
                "least memory), attention (keep every linear layer's output, recompute the attention output and its "
                "logsumexp from the kept q, k, v) or none (keep everything, recompute nothing; the most memory)"),
            SKEW_STRING("train.init_from", train.init_from, {},
                        "A folder `skew import` wrote: every optimizer starts from its weights (model.safetensors) "
                        "instead of the initializer, with fresh optimizer state; its config.yaml's model section must "
                        "equal this one (`skew train --init-from DIR`); empty: the initializer"),

            SKEW_CHOICE("runtime.backend", runtime.backend,
                        "Where to train: cuda, cpu, or auto (cuda when a GPU is present)"),
            SKEW_INT("runtime.threads", runtime.threads, 0, 4096, "CPU threads; 0 = all cores"),
            SKEW_CHOICE("runtime.grad_dtype", runtime.grad_dtype,
                        "Gradient storage (bf16 as the paper; fp32 accumulates microbatches exactly)"),
            SKEW_FLOAT("runtime.workspace_gib", runtime.workspace_gib, 0, 1024, false,
                       "Library workspace (cuBLASLt) reserved in the plan, GiB"),
            SKEW_STRING("runtime.out_dir", runtime.out_dir, {}, "Run folder for metrics and checkpoints"),

            SKEW_INT("parallel.expert", parallel.expert, 1, 1 << 20,
                     "Expert parallelism M: the experts of every MoE block split across M ranks (divides "
                     "model.n_experts and the world size)"),
            SKEW_INT("parallel.zero_stage", parallel.zero_stage, 0, 1,
                     "1: optimizer state and its update partitioned across the data-parallel ranks (ZeRO-1; with "
                     "parallel.expert > 1 each expert shard's state over the ranks holding it); 0: every rank holds "
                     "all of it"),
            SKEW_FLOAT("parallel.bucket_mib", parallel.bucket_mib, 0, 1 << 20, true,
                       "Gradient all-reduce bucket size, MiB: consecutive parameters in reverse table order summed by "
                       "one collective per tensor (GPU) or of a packed copy (CPU)"),
            SKEW_BOOL("parallel.overlap_grad_reduce", parallel.overlap_grad_reduce,
                      "Start each gradient bucket's sum as soon as the last microbatch's backward has completed it "
                      "(GPU: on a second stream), instead of after the backward; the same sums either way (not with "
                      "parallel.expert > 1 on GPUs)"),
        };
        return s;
    }();
    return specs;
}

const std::vector<std::pair<std::string, std::string>>& section_key_aliases() {
    static const std::vector<std::pair<std::string, std::string>> aliases = {
        {"model.layernorm_eps", "model.norm_eps"},  // renamed: it is the epsilon of RMSNorm too
    };
    return aliases;
}

std::string canonical_section_key(const std::string& path) {
    for (const auto& [alias, key] : section_key_aliases())
        if (path == alias) return key;
    return path;
}

const std::vector<KeySpec>& optimizer_key_specs() {
    static const std::vector<KeySpec> specs = [] {
        std::vector<KeySpec> s = {
            SKEW_OPT_CHOICE("type", type, "Algorithm; needed only when the entry's name is not a built-in"),
            SKEW_OPT_FLOAT("lr", lr, 0, 10, true, "Peak learning rate (cosine schedule with warmup)"),
            open_max(SKEW_OPT_FLOAT("beta1", beta1, 0, 1, false,
                                    "First-moment decay (Lion: interpolation beta1); 1 would freeze the moment and "
                                    "divide by a zero bias correction")),
            open_max(SKEW_OPT_FLOAT("beta2", beta2, 0, 1, false,
                                    "Second-moment decay (Lion: momentum beta2); 1 divides by a zero bias correction")),
            SKEW_OPT_FLOAT("eps", eps, 0, 1, true,
                           "Epsilon (SkewAdam: clamp inside the sqrt; AdamW: added to sqrt(v_hat))"),
            SKEW_OPT_FLOAT("weight_decay", weight_decay, 0, 1, false,
                           "Decoupled weight decay of backbone and experts (router: 0), non-SkewAdam types"),
            SKEW_OPT_CHOICE("rounding", rounding,
                            "bf16 write-back: exact stochastic rounding, the paper's dithered approximation, or "
                            "nearest"),
            SKEW_OPT_CHOICE("weight_decay_mode", weight_decay_mode,
                            "fused: decay in fp32 before rounding (survives bf16); bf16_premultiply: the paper's "
                            "trainer (a no-op)"),
            SKEW_OPT_FLOAT("update_clip", update_clip, 0, 1e30, true,
                           "Update-RMS clip threshold (SkewAdam, Adafactor)"),
            open_max(SKEW_OPT_FLOAT("muon_momentum", muon_momentum, 0, 1, false, "Muon momentum mu")),
            SKEW_OPT_INT("ns_steps", ns_steps, 1, 100, "Muon Newton-Schulz iterations"),
            SKEW_OPT_BOOL("nesterov", nesterov, "Muon: Nesterov momentum"),
            SKEW_OPT_BOOL("shape_scale", shape_scale, "Muon: scale updates by sqrt(max(1, rows/cols))"),
            SKEW_OPT_BOOL("ema_momentum", ema_momentum, "Muon: EMA momentum instead of the paper's sum form"),
            SKEW_OPT_FLOAT("adam_lr", adam_lr, 0, 10, true, "Muon: internal Adam lr (scaled by the schedule)"),
            SKEW_OPT_FLOAT("decay_rate", decay_rate, -10, 0, false, "Adafactor: beta2_t = 1 - t^decay_rate"),
            SKEW_OPT_FLOAT("eps1", eps1, 0, 1, true, "Adafactor: added to G^2 before the row/column means"),
            SKEW_OPT_INT("rank", rank, 1, 1 << 20, "GaLore projection rank"),
            SKEW_OPT_INT("update_proj_gap", update_proj_gap, 1, 1e12,
                         "GaLore (reference form): steps between projector refreshes"),
            SKEW_OPT_FLOAT("galore_scale", galore_scale, 0, 100, true, "GaLore (reference form): update scale"),
        };
        for (Tier t : {Tier::BACKBONE, Tier::EXPERTS, Tier::ROUTER, Tier::SHARED_EXPERTS})
            for (const char* f : {"momentum", "second_moment", "weight_decay"}) s.push_back(tier_key(t, f));
        return s;
    }();
    return specs;
}

std::string format_config_value(const ConfigValue& v) {
    struct V {
        std::string operator()(int64_t x) const { return std::to_string(x); }
        std::string operator()(double x) const { return fmt::format("{}", x); }
        std::string operator()(bool x) const { return x ? "true" : "false"; }
        std::string operator()(const std::string& x) const { return x.empty() ? "\"\"" : x; }
        std::string operator()(const std::vector<int64_t>& x) const { return fmt::format("[{}]", fmt::join(x, ", ")); }
        std::string operator()(const std::vector<std::string>& x) const {
            return fmt::format("[{}]", fmt::join(x, ", "));
        }
    };
    return std::visit(V{}, v);
}

std::vector<std::pair<std::string, std::string>> config_section_values(const Config& cfg, const std::string& section) {
    std::vector<std::pair<std::string, std::string>> out;
    const std::string prefix = section + ".";
    for (const KeySpec& k : section_key_specs())
        if (k.path.compare(0, prefix.size(), prefix) == 0)
            out.emplace_back(k.path.substr(prefix.size()), format_config_value(k.get(cfg)));
    return out;
}

bool in_key_range(const KeySpec& k, double v) {
    const bool low_ok = k.min_exclusive ? v > k.min : v >= k.min;
    const bool high_ok = k.max_exclusive ? v < k.max : v <= k.max;
    return low_ok && high_ok;
}

bool in_key_range(const KeySpec& k, int64_t v) {
    // integer bounds of the schema are integral doubles; past the int64 range a bound is no limit
    constexpr double LIMIT = 9.2233720368547758e18;
    const bool low_ok = k.min <= -LIMIT || (k.min_exclusive ? v > int64_t(k.min) : v >= int64_t(k.min));
    const bool high_ok = k.max >= LIMIT || (k.max_exclusive ? v < int64_t(k.max) : v <= int64_t(k.max));
    return low_ok && high_ok;
}

std::string key_range_text(const KeySpec& k) {
    std::string r = fmt::format("{} {}", k.min_exclusive ? ">" : ">=", k.min);
    if (k.max < 1e299) r += fmt::format(" and {} {}", k.max_exclusive ? "<" : "<=", k.max);
    return r;
}

std::string config_reference_markdown() {
    std::string out;
    auto range = [](const KeySpec& k) -> std::string {
        if (!k.choices.empty() && k.type == KeyType::STRING)
            return "one of " + fmt::format("{}", fmt::join(k.choices, ", "));
        if (k.type == KeyType::INT || k.type == KeyType::FLOAT || k.type == KeyType::INT_LIST) {
            std::string lo = k.min <= -1e299 ? "" : fmt::format("{} {}", k.min_exclusive ? ">" : ">=", k.min);
            if (k.max_exclusive)
                lo += fmt::format("{}< {}", lo.empty() ? "" : ", ", k.max);  // an open end is a rule, not a cap
            if (!k.choices.empty()) lo += fmt::format(", or {}", fmt::join(k.choices, ", "));  // a list or a word
            return lo;
        }
        return "";
    };
    auto row = [&](const std::string& key, const KeySpec& k, const std::string& def) {
        std::string r = range(k);
        out += fmt::format("| `{}` | {} | `{}` | {}{} |\n", key, choice_name(k.type), def, k.doc,
                           r.empty() ? "" : " (" + r + ")");
    };
    const Config defaults;
    out += "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
    for (const KeySpec& k : section_key_specs()) row(k.path, k, format_config_value(k.get(defaults)));
    const OptimizerConfig skew = builtin_optimizer("skewadam");
    for (const KeySpec& k : optimizer_key_specs())
        row("optimizers.<name>." + k.path, k, format_config_value(k.get_opt(skew)));
    return out;
}

}  // namespace skew
