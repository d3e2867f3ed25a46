// skew plan --hf: the plan of a published model from its config.json equals the plan of the
// repository's config of the same shape (configs/mixtral-8x7b.yaml, configs/qwen3-30b-a3b.yaml,
// written from those config.json files): the same parameters by tier and the same peak.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "hf_test_util.h"

using namespace skew::test;
using nlohmann::json;

namespace {

// The published config.json fields of Qwen3-30B-A3B and Mixtral-8x7B-v0.1 (docs/architectures.md's shapes).
const char* QWEN3_30B_A3B = R"({"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
 "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
 "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
 "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
 "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
 "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
 "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
 "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";
const char* MIXTRAL_8X7B = R"({"architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
 "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
 "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
 "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
 "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": true,
 "vocab_size": 32000})";

json plan(const std::string& args) {
    const Run r = run_skew("plan " + args +
                           " --json --optimizer skewadam --set train.seq_len=4096 --set "
                           "train.batch_size=64 --set train.microbatch=1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    return json::parse(r.output);
}

void same_plan(const char* published, const std::string& name, const std::string& yaml, int64_t total) {
    const std::string path = hf_scratch("plan-" + name) + "/config.json";
    std::ofstream(path) << published;
    const json hf = plan("--hf " + path), ours = plan(std::string(SKEW_SOURCE_DIR) + "/configs/" + yaml);
    CHECK(hf["params"]["total"].get<int64_t>() == total);
    CHECK(hf["params"] == ours["params"]);
    CHECK(hf["weights"] == ours["weights"]);
    CHECK(hf["state"] == ours["state"]);
}

}  // namespace

TEST_CASE("skew plan --hf of Qwen3-30B-A3B's config.json plans its 30,532,122,624 parameters as its config does",
          "[hf]") {
    same_plan(QWEN3_30B_A3B, "qwen3", "qwen3-30b-a3b.yaml", 30532122624);
}

TEST_CASE("skew plan --hf of Mixtral-8x7B's config.json plans its 46,702,792,704 parameters as its config does",
          "[hf]") {
    same_plan(MIXTRAL_8X7B, "mixtral", "mixtral-8x7b.yaml", 46702792704);
}
