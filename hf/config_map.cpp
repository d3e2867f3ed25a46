// config.json <-> the model section (docs/huggingface.md, "config.json"): the fields of
// MixtralConfig, OlmoeConfig and Qwen3MoeConfig as the published checkpoints spell them.
#include "hf/config_map.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/run_folder.h"
#include "engine/config_schema.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "kernels/common/attention_head_dims.h"

namespace skew::hf {

namespace {

// The fields of one config.json, each read with its name in the error.
struct Fields {
    const nlohmann::json& j;
    const std::string& source;
    const char* arch;

    bool given(const char* key) const { return j.contains(key) && !j[key].is_null(); }
    int64_t integer(const char* key) const {
        if (!given(key)) fail("{}: {} is missing ({} needs it)", source, key, arch);
        const int64_t v = json_int_or(j, key, 0, source);
        if (v < 0) fail("{}: {} is {}, expected >= 0", source, key, v);
        return v;
    }
    int64_t integer_or(const char* key, int64_t fallback) const { return given(key) ? integer(key) : fallback; }
    double number(const char* key) const {
        if (!given(key)) fail("{}: {} is missing ({} needs it)", source, key, arch);
        if (!j[key].is_number()) fail("{}: {} must be a number, got {}", source, key, j[key].dump());
        return j[key].get<double>();
    }
    double number_or(const char* key, double fallback) const { return given(key) ? number(key) : fallback; }
    bool boolean_or(const char* key, bool fallback) const {
        if (!given(key)) return fallback;
        if (!j[key].is_boolean()) fail("{}: {} must be true or false, got {}", source, key, j[key].dump());
        return j[key].get<bool>();
    }
    // A field skew has no counterpart for: absent, null, or the value that means "off".
    void off(const char* key, const nlohmann::json& off_value, const std::string& why) const {
        if (!given(key) || j[key] == off_value) return;
        fail("{}: {} is {}: {}", source, key, j[key].dump(), why);
    }
};

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

}  // namespace

nlohmann::json read_hf_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open (a Hugging Face checkpoint folder holds config.json)", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return json_parse_strict(ss.str(), path);
}

ModelConfig model_config_from_hf(const nlohmann::json& config, Family f, const std::string& source) {
    const FamilySpec& fam = family_spec(f);
    const Fields c{config, source, fam.architecture};
    ModelConfig m;
    // shapes
    m.d_model = c.integer("hidden_size");
    m.n_blocks = c.integer("num_hidden_layers");
    m.n_heads = c.integer("num_attention_heads");
    m.n_kv_heads = c.integer("num_key_value_heads");
    if (m.n_heads == 0 || m.n_kv_heads == 0 || m.n_blocks == 0 || m.d_model == 0)
        fail("{}: hidden_size, num_hidden_layers, num_attention_heads and num_key_value_heads must be >= 1", source);
    const int64_t hd = c.integer_or("head_dim", 0);
    m.head_dim_key = hd == 0 || (m.d_model % m.n_heads == 0 && hd == m.d_model / m.n_heads) ? 0 : hd;
    m.vocab_size = c.integer("vocab_size");
    m.padded_vocab_size = round_up(m.vocab_size, 64);  // skew's GEMM padding; the extra rows are zero
    m.max_seq_len = c.integer("max_position_embeddings");
    m.n_experts = c.integer(fam.n_experts_key);
    if (m.n_experts == 0)
        fail("{}: {} is 0: a model without experts is not an MoE skew trains", source, fam.n_experts_key);
    m.top_k = c.integer("num_experts_per_tok");
    m.d_expert = c.integer(fam.d_expert_key);
    m.d_ff = fam.dense_blocks ? c.integer("intermediate_size") : m.d_expert;
    m.moe_blocks.clear();
    if (fam.dense_blocks) {  // Qwen3MoeDecoderLayer: MoE where not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0
        const int64_t step = c.integer_or("decoder_sparse_step", 1);
        if (step < 1) fail("{}: decoder_sparse_step is {}, expected >= 1", source, step);
        std::vector<int64_t> dense;
        if (c.given("mlp_only_layers")) {
            const auto& l = config["mlp_only_layers"];
            if (!l.is_array()) fail("{}: mlp_only_layers must be a list of layer indices, got {}", source, l.dump());
            for (const auto& x : l) {
                if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= m.n_blocks)
                    fail("{}: mlp_only_layers {} holds {}, not a layer index below num_hidden_layers {}", source,
                         l.dump(), x.dump(), m.n_blocks);
                dense.push_back(x.get<int64_t>());
            }
        }
        for (int64_t b = 0; b < m.n_blocks; ++b)
            if (std::find(dense.begin(), dense.end(), b) == dense.end() && (b + 1) % step == 0)
                m.moe_blocks.push_back(b);
    } else {
        for (int64_t b = 0; b < m.n_blocks; ++b) m.moe_blocks.push_back(b);
    }
    m.moe_blocks_all = int64_t(m.moe_blocks.size()) == m.n_blocks;
    // routing: softmax over all experts, top-k, renormalized (Mixtral always) or not
    m.normalize_top_k = fam.renormalizes_top_k || c.boolean_or("norm_topk_prob", false);
    if (m.top_k == 1 && m.normalize_top_k)
        fail(
            "{}: num_experts_per_tok 1 with renormalized gates ({}) gives every token gate 1; skew's top-1 gates by "
            "the router probability",
            source,
            fam.renormalizes_top_k ? fmt::format("{} always renormalizes", fam.architecture) : "norm_topk_prob true");
    if (m.top_k == 1) m.normalize_top_k = false;  // the same gates; skew's top-1 never renormalizes
    // the block: RoPE, RMSNorm, the family's QK-norm
    m.positions = Positions::ROPE;
    m.norm = NormKind::RMSNORM;
    m.norm_eps = c.number("rms_norm_eps");
    m.qk_norm = fam.qk_norm;
    m.tie_embeddings = c.boolean_or("tie_word_embeddings", false);
    m.attention_bias = false;
    if (c.given("rope_theta")) {
        m.rope_theta = c.number("rope_theta");
    } else if (c.given("rope_parameters")) {  // transformers v5: {"rope_type": "default", "rope_theta": ...}
        const auto& rp = config["rope_parameters"];
        const Fields r{rp, source, fam.architecture};
        if (!rp.is_object()) fail("{}: rope_parameters must be an object, got {}", source, rp.dump());
        if (r.given("rope_type") && rp["rope_type"] != "default")
            fail("{}: rope_parameters.rope_type is {}: skew's RoPE is the default (unscaled) one", source,
                 rp["rope_type"].dump());
        m.rope_theta = r.number("rope_theta");
    } else {
        fail("{}: rope_theta is missing ({} needs it)", source, fam.architecture);
    }
    c.off("rope_scaling", nullptr, "skew's RoPE has no scaling (linear, dynamic, YaRN); only rope_scaling null");
    c.off("partial_rotary_factor", 1.0, "skew rotates every lane of a head");
    if (c.given("hidden_act") && config["hidden_act"] != "silu")
        fail("{}: hidden_act is {}: skew's experts are SwiGLU (silu)", source, config["hidden_act"].dump());
    c.off("attention_dropout", 0.0, "skew has no dropout");
    for (const OffField& o : fam.off_fields) c.off(o.key, o.off, o.why);
    // training settings: the published balance-loss coefficient, the initializer; no noise, no z-loss
    m.balance_loss_coef = c.number_or("router_aux_loss_coef", fam.balance_loss_coef);
    m.init_std = c.number_or("initializer_range", 0.02);
    m.router_noise_std = 0;
    m.z_loss_coef = 0;
    return m;
}

nlohmann::json hf_config_from_model(const ModelConfig& m, Family f) {
    const FamilySpec& fam = family_spec(f);
    nlohmann::json j = {
        {"architectures", {fam.architecture}},
        {"model_type", fam.model_type},
        {"hidden_size", m.d_model},
        {"num_hidden_layers", m.n_blocks},
        {"num_attention_heads", m.n_heads},
        {"num_key_value_heads", m.n_kv_heads},
        {"head_dim", m.head_dim()},
        {"vocab_size", m.vocab_size},
        {"max_position_embeddings", m.max_seq_len},
        {"num_experts_per_tok", m.top_k},
        {"rope_theta", m.rope_theta},
        {"rope_scaling", nullptr},
        {"rms_norm_eps", m.norm_eps},
        {"tie_word_embeddings", m.tie_embeddings},
        {"hidden_act", "silu"},
        {"attention_dropout", 0.0},
        {"router_aux_loss_coef", m.balance_loss_coef},
        {"initializer_range", m.init_std},
        {"torch_dtype", "bfloat16"},
    };
    j[fam.n_experts_key] = m.n_experts;
    j[fam.d_expert_key] = m.d_expert;
    if (!fam.renormalizes_top_k) j["norm_topk_prob"] = m.normalize_top_k && m.top_k > 1;
    for (const OffField& o : fam.off_fields) j[o.key] = o.off;
    if (fam.dense_blocks) {
        j["intermediate_size"] = m.d_ff;
        j["decoder_sparse_step"] = 1;
        std::vector<int64_t> dense;
        for (int64_t b = 0; b < m.n_blocks; ++b)
            if (!m.is_moe_block(b)) dense.push_back(b);
        j["mlp_only_layers"] = dense;
        j["sliding_window"] = nullptr;
        j["max_window_layers"] = m.n_blocks;
    }
    return j;
}

std::string model_section_yaml(const ModelConfig& m) {
    Config cfg;
    cfg.model = m;
    std::string out = "model:\n";
    for (const auto& [key, value] : config_section_values(cfg, "model")) {
        const bool all = key == "moe_blocks" && int64_t(m.moe_blocks.size()) == m.n_blocks;
        out += fmt::format("  {}: {}\n", key, all ? std::string("all") : value);
    }
    return out;
}

std::string config_yaml(const ModelConfig& m) {
    const int64_t seq_len = TrainConfig{}.seq_len;
    const bool cpu_only = m.head_dim_key != 0 && !attention_head_dim_supported(m.head_dim_key);
    return model_section_yaml(m) +
           (m.max_seq_len < seq_len ? fmt::format("train:\n  seq_len: {}\n", m.max_seq_len) : "") +
           (cpu_only
                ? fmt::format("runtime:\n  backend: cpu  # head_dim {}: the CUDA attention kernels take 16, 32, 64 "
                              "and 128, the CPU any width\n",
                              m.head_dim_key)
                : "");
}

Config config_from_model(const ModelConfig& m, const std::string& source, const std::vector<std::string>& overrides) {
    return load_config_text(config_yaml(m), source, overrides);
}

Config config_from_hf_path(const std::string& path, const std::vector<std::string>& overrides) {
    const std::string file = std::filesystem::is_directory(path) ? HfFolder{path}.config() : path;
    const nlohmann::json j = read_hf_config(file);
    const Family f = family_of_hf_config(j, file);
    return config_from_model(model_config_from_hf(j, f, file), file + " (as skew's model section)", overrides);
}

}  // namespace skew::hf
