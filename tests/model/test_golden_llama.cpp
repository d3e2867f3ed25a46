// The Llama-family block (model.positions: rope, model.norm: rmsnorm, model.tie_embeddings: false,
// every block an MoE: Mixtral's shape, docs/architectures.md) against an independent PyTorch reference
// (tests/reference/model/make_golden_llama.py: float64 autograd from the published equations, router
// noise off): loss parts, probed logits, routing counts and every parameter gradient. Tolerances as
// the paper block's golden test against its exact equations (tests/model/test_golden.cpp): the engine
// keeps weights and activations in bf16 with fp32 accumulation; the reference runs the same
// bf16-valued weights in float64, so about a dozen bf16 roundings separate them, 0.5-4% per gradient
// tensor and nearly orthogonal to the reference; a wrong equation (a rotation by the wrong angle or
// lane pairing, a norm with a mean, the head tied by mistake) errs by O(1).
#include <catch2/catch.hpp>

#include <cmath>

#include "golden_fixture.h"
#include "model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

constexpr double LOSS_REL = 3e-3;    // LM, balance, total loss (z: 5x, a square of the lse)
constexpr double LOGITS_REL = 2e-2;  // ||logits - ref|| / ||ref|| over the probed rows
constexpr double GRAD_REL = 5e-2;    // ||g - ref|| / ||ref|| per parameter tensor
constexpr double GRAD_SCALE = 3e-2;  // |<g, ref> / <ref, ref> - 1| per parameter tensor

std::string fixture(const std::string& name) { return std::string(SKEW_SOURCE_DIR) + "/tests/reference/model/" + name; }

}  // namespace

TEST_CASE("rope + rmsnorm + an untied head + every block MoE match the PyTorch reference", "[model][golden]") {
    const char* make = "tests/reference/model/make_golden_llama.py";
    auto in = read_golden_records(fixture("golden_llama_inputs.bin"), make);
    auto ref = read_golden_records(fixture("golden_llama.bin"), make);
    auto t = make_test_model(LLAMA_GOLDEN_YAML, {}, 2);
    Model& m = t->model;
    const ModelConfig& c = t->cfg.model;
    const std::vector<double> want_cfg = {double(c.vocab_size),
                                          double(c.padded_vocab_size),
                                          double(c.d_model),
                                          double(c.n_blocks),
                                          double(c.n_heads),
                                          double(c.n_kv_heads),
                                          double(c.max_seq_len),
                                          double(c.n_experts),
                                          double(c.d_expert),
                                          double(c.top_k),
                                          double(t->cfg.train.batch_size),
                                          double(t->cfg.train.seq_len),
                                          c.rope_theta};
    REQUIRE(in["config"].data.size() == want_cfg.size());
    for (size_t i = 0; i < want_cfg.size(); ++i) REQUIRE(double(in["config"].data[i]) == want_cfg[i]);
    // the architecture's table: no position table, no norm biases, an lm_head of its own
    CHECK_FALSE(t->table.find("embed.positions"));
    CHECK_FALSE(t->table.find("blocks.0.ln1.bias"));
    CHECK_FALSE(t->table.find("final_ln.bias"));
    REQUIRE(t->table.find("lm_head"));
    CHECK(t->table.find("lm_head")->role == Role::OUTPUT_HEAD);

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
    const auto& loss = ref["loss"].data;  // lm, balance, z, total
    INFO("lm " << lp.lm_loss << " vs " << loss[0] << ", balance " << lp.balance_loss << " vs " << loss[1] << ", z "
               << lp.z_loss << " vs " << loss[2]);
    CHECK(std::fabs(lp.lm_loss - loss[0]) <= LOSS_REL * std::fabs(loss[0]));
    CHECK(std::fabs(lp.balance_loss - loss[1]) <= LOSS_REL * std::fabs(loss[1]));
    CHECK(std::fabs(lp.z_loss - loss[2]) <= 5 * LOSS_REL * std::fabs(loss[2]));
    CHECK(std::fabs(lp.total - loss[3]) <= LOSS_REL * std::fabs(loss[3]));

    REQUIRE(lp.moe.size() == 2);  // every block routes
    for (size_t i = 0; i < lp.moe.size(); ++i) {
        const auto& rc = ref["counts." + std::to_string(i)].data;
        REQUIRE(lp.moe[i].counts.size() == rc.size());
        for (size_t e = 0; e < rc.size(); ++e) {
            INFO("MoE block " << lp.moe[i].block << " expert " << e);
            CHECK(lp.moe[i].counts[e] == int64_t(rc[e]));
        }
    }
    const double logit_err = rel_err(lp.probe_logits, ref["logits"].data);
    INFO("logits rel err " << logit_err);
    CHECK(logit_err <= LOGITS_REL);

    double worst = 0.0;
    std::string worst_name;
    for (const ParamRef& p : m.params) {
        const auto& g = ref["grad." + p.info->name].data;
        const std::vector<float> gh = grad_host(p);
        const double e = rel_err(gh, g);
        double dot = 0.0, rr = 0.0;
        for (size_t i = 0; i < g.size(); ++i) dot += double(gh[i]) * g[i], rr += double(g[i]) * g[i];
        const double scale = rr > 0 ? dot / rr : 1.0;
        if (!(e <= worst)) worst = e, worst_name = p.info->name;
        INFO("grad." << p.info->name << " rel err " << e << ", scale " << scale);
        CHECK(e <= GRAD_REL);
        CHECK(std::fabs(scale - 1.0) <= GRAD_SCALE);
    }
    WARN("golden llama: worst gradient error " << worst << " (" << worst_name << "), logits " << logit_err << ", lm "
                                               << lp.lm_loss << " vs " << loss[0]);
}
