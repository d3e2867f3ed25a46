// The Llama-family block (model.positions: rope, model.norm: rmsnorm, model.tie_embeddings: false,
// every block an MoE: Mixtral's shape, docs/architectures.md) and its OLMoE (QK-norm over the full
// widths, top-8 not renormalized), Qwen3 (head_dim > d_model / n_heads, QK-norm per head) and Qwen2
// (q, k, v biases) variants against an independent PyTorch reference
// (tests/reference/model/make_golden_llama.py: float64 autograd from the published equations, router
// noise off): loss parts, probed logits, routing counts and every parameter gradient. Tolerances as
// the paper block's golden test against its exact equations (tests/model/test_golden.cpp): the engine
// keeps weights and activations in bf16 with fp32 accumulation; the reference runs the same
// bf16-valued weights in float64, so about a dozen bf16 roundings separate them, 0.5-4% per gradient
// tensor and nearly orthogonal to the reference; a wrong equation (a rotation by the wrong angle or
// lane pairing, a norm with a mean, the head tied by mistake, a QK-norm over the wrong lanes, a
// bias left out of its gradient) errs by O(1).
#include <catch2/catch.hpp>

#include <cmath>

#include "golden_check.h"
#include "golden_fixture.h"
#include "model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

// Limits: GoldenLimits (tests/model/golden_check.h), the paper block's against its exact equations.

std::string fixture(const std::string& name) { return std::string(SKEW_SOURCE_DIR) + "/tests/reference/model/" + name; }

// Which keys a variant's config record holds (make_golden_llama.py): CONFIG_KEYS (llama), + EXTRA_KEYS
// (the attention-side variants), or + n_shared_experts and d_shared_expert (qwen2moe).
enum class RecordKeys { BASE, ARCHITECTURE, SHARED_EXPERTS };

// The variant's config record, as the script writes it.
std::vector<double> config_record(const Config& cfg, RecordKeys keys) {
    const ModelConfig& c = cfg.model;
    std::vector<double> r = {double(c.vocab_size),
                             double(c.padded_vocab_size),
                             double(c.d_model),
                             double(c.n_blocks),
                             double(c.n_heads),
                             double(c.n_kv_heads),
                             double(c.max_seq_len),
                             double(c.n_experts),
                             double(c.d_expert),
                             double(c.top_k),
                             double(cfg.train.batch_size),
                             double(cfg.train.seq_len),
                             c.rope_theta};
    if (keys == RecordKeys::ARCHITECTURE)
        r.insert(r.end(), {double(c.head_dim_key), double(int(c.qk_norm)), double(c.attention_bias),
                           double(c.normalize_top_k), c.norm_eps});
    if (keys == RecordKeys::SHARED_EXPERTS) r.insert(r.end(), {double(c.n_shared_experts), double(c.d_shared_expert)});
    return r;
}

// One step of the variant `name`'s model from its fixture's weights and batch, checked against its
// reference records; returns the test model for the variant's own checks.
std::unique_ptr<TestModel> check_variant(const std::string& name, const char* yaml,
                                         RecordKeys keys = RecordKeys::ARCHITECTURE) {
    const char* make = "tests/reference/model/make_golden_llama.py";
    auto in = read_golden_records(fixture("golden_" + name + "_inputs.bin"), make);
    auto ref = read_golden_records(fixture("golden_" + name + ".bin"), make);
    auto t = make_test_model(yaml, {}, 2);
    Model& m = t->model;
    const std::vector<double> want_cfg = config_record(t->cfg, keys);
    REQUIRE(in["config"].data.size() == want_cfg.size());
    for (size_t i = 0; i < want_cfg.size(); ++i) {
        INFO(name << " config record " << i);
        REQUIRE(double(in["config"].data[i]) == Approx(want_cfg[i]).epsilon(1e-6));
    }
    // the architecture's table: no position table, no norm biases, an lm_head of its own
    CHECK_FALSE(t->table.find("embed.positions"));
    CHECK_FALSE(t->table.find("blocks.0.ln1.bias"));
    CHECK_FALSE(t->table.find("final_ln.bias"));
    REQUIRE(t->table.find("lm_head"));
    CHECK(t->table.find("lm_head")->role == Role::OUTPUT_HEAD);

    size_t n_weights = 0;
    for (const auto& [key, rec] : in) n_weights += key.rfind("weight.", 0) == 0;
    CHECK(n_weights == m.params.size());  // the reference's table is the engine's, name for name
    for (const ParamRef& p : m.params) {
        const auto it = in.find("weight." + p.info->name);
        REQUIRE(it != in.end());
        REQUIRE(it->second.shape == p.info->shape);
        set_weight(m, p, it->second.data);
    }
    std::vector<int32_t> tokens, targets;
    for (float x : in["tokens"].data) tokens.push_back(int32_t(x));
    for (float x : in["targets"].data) targets.push_back(int32_t(x));
    for (float x : in["probe_rows"].data) m.probe_rows.push_back(int64_t(x));

    model_zero_grads(m);
    const LossParts lp = model_forward_backward(m, tokens.data(), targets.data(), 0, 1, 1, false);
    const GoldenWorst w = check_against_golden(lp, m, ref, 2, GoldenLimits{}, name);  // every block routes
    WARN("golden " << name << ": worst gradient error " << w.grad << " (" << w.grad_name << "), logits " << w.logits
                   << ", lm " << lp.lm_loss << " vs " << ref["loss"].data[0]);
    return t;
}

}  // namespace

TEST_CASE("rope + rmsnorm + an untied head + every block MoE match the PyTorch reference", "[model][golden]") {
    check_variant("llama", LLAMA_GOLDEN_YAML, RecordKeys::BASE);
}

TEST_CASE("the OLMoE block (QK-norm over the full q and k widths, top-8 of 16 not renormalized) matches the reference",
          "[model][golden]") {
    auto t = check_variant("olmoe", OLMOE_GOLDEN_YAML);
    CHECK(t->table.find("blocks.1.attn.q_norm.weight")->shape == std::vector<int64_t>{32});  // 4 heads of 8
    CHECK(t->table.find("blocks.1.attn.k_norm.weight")->shape == std::vector<int64_t>{32});  // MHA: k as wide
}

TEST_CASE(
    "the Qwen3 block (head_dim 16 > d_model / n_heads, QK-norm per head, top-8 renormalized) matches the reference",
    "[model][golden]") {
    auto t = check_variant("qwen3", QWEN3_GOLDEN_YAML);
    CHECK(t->table.find("blocks.0.attn.wq")->shape == std::vector<int64_t>{64, 32});  // q wider than d_model
    CHECK(t->table.find("blocks.0.attn.wo")->shape == std::vector<int64_t>{32, 64});
    CHECK(t->table.find("blocks.0.attn.q_norm.weight")->shape == std::vector<int64_t>{16});  // one head's lanes
}

TEST_CASE("the Qwen2 attention biases (q, k, v) match the reference", "[model][golden]") {
    auto t = check_variant("qwen2", QWEN2_GOLDEN_YAML);
    CHECK(t->table.find("blocks.0.attn.bq")->shape == std::vector<int64_t>{32});
    CHECK(t->table.find("blocks.0.attn.bk")->shape == std::vector<int64_t>{16});
    CHECK_FALSE(t->table.find("blocks.0.attn.bo"));
}

// Qwen2-MoE's FFN side (docs/architectures.md, "Shared experts"): the same block with top-4 of 8
// routed experts, gates not renormalized, and two shared experts of width 24 behind the sigmoid
// gate in both MoE blocks (make_golden_llama.py variant qwen2moe, where each shared expert is its own
// SwiGLU and the engine stores them as one of width 48). Limits as above: the shared experts add the
// same kind of bf16 roundings (two products, the SwiGLU, the gated sum); a gate of the wrong sign,
// a missing gate derivative or the shared output added twice errs by O(1) in some gradient.
TEST_CASE("shared experts with the sigmoid gate (Qwen2-MoE) match the PyTorch reference", "[model][golden]") {
    auto t = check_variant("qwen2moe", QWEN2MOE_GOLDEN_YAML, RecordKeys::SHARED_EXPERTS);
    // one SwiGLU of 2 x 24 per block, in the shared-experts tier, and the gate vector
    for (const char* b : {"blocks.0.", "blocks.1."}) {
        const ParamInfo* w1 = t->table.find(std::string(b) + "moe.shared_experts.w1");
        const ParamInfo* g = t->table.find(std::string(b) + "moe.shared_experts.gate");
        REQUIRE(w1);
        REQUIRE(g);
        CHECK(w1->shape == std::vector<int64_t>{48, 32});
        CHECK(w1->tier == Tier::SHARED_EXPERTS);
        CHECK(w1->role == Role::SHARED_EXPERT_W1);
        CHECK_FALSE(is_expert_bank(*w1));
        CHECK(g->shape == std::vector<int64_t>{32});
        CHECK(g->role == Role::SHARED_EXPERT_GATE);
    }
}
