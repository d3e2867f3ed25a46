// The FFN-side options of today's MoE models in the config, the parameter table, the tier policy and
// the memory plan (docs/architectures.md): shared experts (model.n_shared_experts, d_shared_expert,
// shared_expert_gate) and their tier (optimizers.<name>.tiers.shared_experts), `moe_blocks: all`,
// and model.norm_eps with its former name model.layernorm_eps.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "engine/config.h"
#include "engine/config_schema.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "optim/optimizer.h"
#include "plan/plan.h"

using namespace skew;

namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    try {
        load_config_text(yaml, "test.yaml", overrides);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// tiny.yaml's shape with every block an MoE and two shared experts of width 48 behind the gate.
const char* SHARED_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: all
  n_heads: 4
  n_kv_heads: 2
  max_seq_len: 16
  n_experts: 8
  d_expert: 16
  top_k: 2
  n_shared_experts: 2
  d_shared_expert: 24
  shared_expert_gate: sigmoid
train:
  batch_size: 4
  seq_len: 16
  microbatch: 2
runtime:
  backend: cpu
  workspace_gib: 0
)";

bool has_component(const MemoryPlan& p, const std::string& name) {
    return std::any_of(p.state_components.begin(), p.state_components.end(),
                       [&](const PlanComponent& c) { return c.name == name; });
}

}  // namespace

TEST_CASE("model.norm_eps is read under its former name layernorm_eps, and both given is an error naming both") {
    CHECK(load_config_text("model:\n  norm_eps: 1e-6\n", "t.yaml").model.norm_eps == 1e-6);
    const Config old = load_config_text("model:\n  layernorm_eps: 2e-6\n", "t.yaml");
    CHECK(old.model.norm_eps == 2e-6);
    CHECK(old.resolved_yaml.find("norm_eps: 2e-06") != std::string::npos);  // resolved under the key's name
    CHECK(old.resolved_yaml.find("layernorm_eps") == std::string::npos);
    CHECK(load_config_text("train:\n  steps: 5\n", "t.yaml", {"model.layernorm_eps=3e-6"}).model.norm_eps == 3e-6);
    const std::string both = error_of("model:\n  norm_eps: 1e-6\n  layernorm_eps: 1e-6\n");
    INFO(both);
    CHECK(both.find("test.yaml:3:18: model.layernorm_eps: model.norm_eps is given too (at test.yaml:2:13)") == 0);
    CHECK(both.find("model.layernorm_eps is the former name of model.norm_eps") != std::string::npos);
    CHECK(error_of("train:\n  steps: 5\n", {"model.norm_eps=1e-6", "model.layernorm_eps=1e-6"})
              .find("--set model.layernorm_eps=1e-6: model.layernorm_eps: model.norm_eps is given too") == 0);
    // the command line overrides the file under either name, as for any key
    CHECK(load_config_text("model:\n  layernorm_eps: 1e-6\n", "t.yaml", {"model.norm_eps=4e-6"}).model.norm_eps ==
          4e-6);
    CHECK(error_of("model:\n  layernorm_eps: 0\n").find("model.layernorm_eps: 0 is out of range") != std::string::npos);
    CHECK(canonical_section_key("model.layernorm_eps") == "model.norm_eps");
    CHECK(canonical_section_key("model.d_model") == "model.d_model");
    // a run folder's config.yaml written before the rename (and before the shared-experts keys) loads
    const Config fixture = load_config(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report/config.yaml");
    CHECK(fixture.model.norm_eps == 1e-5);
}

TEST_CASE("moe_blocks: all routes in every block of the final n_blocks, and another word names the key") {
    const Config c = load_config_text("model:\n  n_blocks: 3\n  moe_blocks: all\n", "t.yaml", {"model.n_blocks=5"});
    CHECK(c.model.moe_blocks == std::vector<int64_t>{0, 1, 2, 3, 4});
    CHECK(c.resolved_yaml.find("moe_blocks: [0, 1, 2, 3, 4]") != std::string::npos);
    CHECK(load_config_text(c.resolved_yaml, "resolved.yaml").model.moe_blocks == c.model.moe_blocks);
    CHECK(load_config_text("train:\n  steps: 5\n", "t.yaml", {"model.moe_blocks=all"}).model.moe_blocks ==
          std::vector<int64_t>{0, 1});
    // a list after `all` replaces it
    CHECK(load_config_text("model:\n  moe_blocks: all\n", "t.yaml", {"model.moe_blocks=[0]"}).model.moe_blocks ==
          std::vector<int64_t>{0});
    CHECK(error_of("model:\n  moe_blocks: every\n") ==
          "test.yaml:2:15: model.moe_blocks: expected list of integers or all, got 'every'");
    CHECK(config_reference_markdown().find("| `model.moe_blocks` | list of integers | `[1]` |") != std::string::npos);
    CHECK(config_reference_markdown().find("(>= 0, or all)") != std::string::npos);
}

TEST_CASE("shared experts are one SwiGLU of the summed width per MoE block, dense, in their own tier") {
    const Config c = load_config_text(SHARED_YAML, "shared.yaml");
    CHECK(c.model.d_shared() == 48);
    const ParamTable t = build_param_table(c.model, ExpertShard{2, 1});  // an expert-parallel rank
    for (const char* b : {"blocks.0.", "blocks.1."}) {
        const std::string pre = std::string(b) + "moe.shared_experts.";
        const ParamInfo *w1 = t.find(pre + "w1"), *w2 = t.find(pre + "w2"), *w3 = t.find(pre + "w3"),
                        *g = t.find(pre + "gate");
        REQUIRE(w1);
        REQUIRE(w2);
        REQUIRE(w3);
        REQUIRE(g);
        CHECK(w1->shape == std::vector<int64_t>{48, 32});  // replicated: not split by expert parallelism
        CHECK(w3->shape == std::vector<int64_t>{32, 48});
        CHECK(w3->role == Role::SHARED_EXPERT_W3);
        CHECK(g->shape == std::vector<int64_t>{32});
        CHECK(g->dtype == DType::F32);
        for (const ParamInfo* p : {w1, w2, w3, g}) {
            CHECK(p->tier == Tier::SHARED_EXPERTS);
            CHECK_FALSE(is_expert_bank(*p));
            CHECK(p->element_offset() == 0);
        }
    }
    CHECK(t.tier_numel(Tier::SHARED_EXPERTS) == 2 * (3 * 48 * 32 + 32));
    // every token reaches them: counted whole in the active parameters
    const ParamTable none = build_param_table(
        load_config_text(SHARED_YAML, "s.yaml", {"model.n_shared_experts=0", "model.shared_expert_gate=none"}).model);
    CHECK(build_param_table(c.model).active_numel(2, 8) - none.active_numel(2, 8) == 2 * (3 * 48 * 32 + 32));
    // d_shared_expert 0 is d_expert; no gate: no gate vector
    const Config dflt =
        load_config_text(SHARED_YAML, "s.yaml", {"model.d_shared_expert=0", "model.shared_expert_gate=none"});
    CHECK(dflt.model.d_shared() == 32);
    CHECK_FALSE(build_param_table(dflt.model).find("blocks.0.moe.shared_experts.gate"));
    // without shared experts the table is unchanged
    CHECK_FALSE(none.find("blocks.0.moe.shared_experts.w1"));
    CHECK(none.tier_numel(Tier::SHARED_EXPERTS) == 0);
}

TEST_CASE("the shared-expert keys refuse what has no meaning, naming the key") {
    CHECK(error_of("model:\n  shared_expert_gate: sigmoid\n") ==
          "test.yaml:2:23: model.shared_expert_gate: sigmoid gates the shared experts' output, but "
          "model.n_shared_experts is 0");
    CHECK(
        error_of("model:\n  n_shared_experts: 1\n  moe_blocks: []\n")
            .find("model.n_shared_experts: 1 shared experts sit in the MoE blocks, but model.moe_blocks lists none") !=
        std::string::npos);
    CHECK(error_of("model:\n  shared_expert_gate: softmax\n").find("'softmax' is not one of none, sigmoid") !=
          std::string::npos);
    CHECK(error_of("model:\n  n_shared_experts: -1\n").find("model.n_shared_experts: -1 is out of range") !=
          std::string::npos);
}

TEST_CASE("the shared-experts tier defaults to the backbone's policy and is set on its own") {
    const int bb = int(Tier::BACKBONE), sh = int(Tier::SHARED_EXPERTS);
    for (const std::string& n : builtin_optimizer_names()) {
        const OptimizerConfig o = builtin_optimizer(n);
        if (o.type != OptimizerType::SKEWADAM) continue;
        INFO(n);
        CHECK(o.tiers[sh].momentum == o.tiers[bb].momentum);
        CHECK(o.tiers[sh].second_moment == o.tiers[bb].second_moment);
        CHECK(o.tiers[sh].weight_decay == o.tiers[bb].weight_decay);
    }
    CHECK(builtin_optimizer("skewadam").tiers[sh].momentum == MomentumKind::FP32);
    const Config c = load_config_text(
        SHARED_YAML, "s.yaml",
        {"optimizers.expert-tier.type=skewadam", "optimizers.expert-tier.tiers.shared_experts.momentum=none",
         "train.optimizers=[skewadam, expert-tier]"});
    REQUIRE(c.optimizers.size() == 2);
    CHECK(c.optimizers[1].tiers[sh].momentum == MomentumKind::NONE);
    CHECK(c.optimizers[1].tiers[bb].momentum == MomentumKind::FP32);
    CHECK(error_of("train:\n  steps: 5\n", {"optimizers.adamw.tiers.shared_experts.momentum=fp32"})
              .find("tiers.* is a SkewAdam setting") != std::string::npos);
    CHECK(config_reference_markdown().find("`optimizers.<name>.tiers.shared_experts.momentum` | string | `fp32`") !=
          std::string::npos);

    // the policy each optimizer gives the shared experts' tensors
    const ParamTable t = build_param_table(c.model);
    const ParamInfo &w1 = *t.find("blocks.0.moe.shared_experts.w1"), &g = *t.find("blocks.0.moe.shared_experts.gate");
    CHECK(param_policy(c.optimizers[0], w1).momentum == MomentumKind::FP32);
    CHECK(param_policy(c.optimizers[0], w1).second_moment == SecondMomentKind::FACTORED);
    CHECK(param_policy(c.optimizers[1], w1).momentum == MomentumKind::NONE);
    CHECK(param_policy(c.optimizers[1], w1).second_moment == SecondMomentKind::FACTORED);
    CHECK(param_policy(c.optimizers[0], g).second_moment == SecondMomentKind::FULL);  // a vector
    CHECK_FALSE(param_policy(builtin_optimizer("muon"), w1).muon_adam);               // orthogonalized
    CHECK(param_policy(builtin_optimizer("muon"), g).muon_adam);
    CHECK(param_policy(builtin_optimizer("galore"), w1).galore_project);
}

TEST_CASE("a resolved config written before the shared-experts tier reloads, a non-SkewAdam entry included") {
    const Config c = load_config_text("train:\n  optimizers: [adamw, skewadam]\n", "t.yaml");
    std::string old;  // the resolved text without the three tiers.shared_experts lines of each entry
    for (size_t i = 0; i < c.resolved_yaml.size();) {
        const size_t e = c.resolved_yaml.find('\n', i);
        const std::string line = c.resolved_yaml.substr(i, e == std::string::npos ? std::string::npos : e - i + 1);
        if (line.find("tiers.shared_experts.") == std::string::npos) old += line;
        i = e == std::string::npos ? c.resolved_yaml.size() : e + 1;
    }
    REQUIRE(old.size() < c.resolved_yaml.size());
    const Config again = load_config_text(old, "config.yaml");
    CHECK(again.resolved_yaml == c.resolved_yaml);
}

TEST_CASE("the plan holds the shared experts' state in rows of their own and their activation slots per mode") {
    const Config c = load_config_text(SHARED_YAML, "s.yaml");
    const ParamTable t = build_param_table(c.model);
    const MemoryPlan p = build_memory_plan(c, t, builtin_optimizer("skewadam"), 2);
    CHECK(has_component(p, "Shared expert momentum (fp32)"));
    CHECK(has_component(p, "Shared expert factored 2nd moments"));
    CHECK(has_component(p, "Shared expert gates, full 2nd moment"));
    // rows in order: backbone, shared experts, experts, router
    std::vector<std::string> order;
    for (const PlanComponent& pc : p.state_components) order.push_back(pc.name.substr(0, pc.name.find(' ')));
    CHECK(std::is_sorted(order.begin(), order.end(), [](const std::string& a, const std::string& b) {
        auto rank = [](const std::string& s) {
            return s == "Backbone" ? 0 : s == "Shared" ? 1 : s == "Expert" ? 2 : 3;
        };
        return rank(a) < rank(b);
    }));
    const int64_t N = 2 * 16, ds = 48, d = 32;
    for (const char* name : {"act.shared_h1", "act.shared_h2", "act.shared_act"}) {
        INFO(name);
        REQUIRE(p.find(name) >= 0);  // one set for every block under train.recompute: block
        CHECK(p.buffers[size_t(p.find(name))].bytes() == N * ds * 2);
    }
    CHECK(p.buffers[size_t(p.find("act.shared_out"))].bytes() == N * d * 2);
    CHECK(p.buffers[size_t(p.find("act.shared_gate_logit"))].bytes() == N * 4);
    for (const char* name : {"act.d_shared_h1", "act.d_shared_act", "act.d_shared_out", "act.d_shared_gate_logit"})
        CHECK(p.find(name) >= 0);
    // kept per block where the mode keeps the working slots
    Config none = c;
    none.train.recompute = Recompute::NONE;
    const MemoryPlan pn = build_memory_plan(none, t, builtin_optimizer("skewadam"), 2);
    CHECK(pn.find("act.shared_h1.0") >= 0);
    CHECK(pn.find("act.shared_h1.1") >= 0);
    CHECK(pn.find("act.shared_gate_logit.1") >= 0);
    CHECK(pn.activation_bytes > p.activation_bytes);
    // without the gate no ungated output or logit is held
    const Config ng = load_config_text(SHARED_YAML, "s.yaml", {"model.shared_expert_gate=none"});
    const MemoryPlan pg = build_memory_plan(ng, build_param_table(ng.model), builtin_optimizer("skewadam"), 2);
    CHECK(pg.find("act.shared_h1") >= 0);
    CHECK(pg.find("act.shared_out") < 0);
    CHECK(pg.find("act.d_shared_gate_logit") < 0);
    // the expert tier's entry keeps no momentum for them
    OptimizerConfig et = builtin_optimizer("skewadam");
    et.tiers[int(Tier::SHARED_EXPERTS)].momentum = MomentumKind::NONE;
    const MemoryPlan pe = build_memory_plan(c, t, et, 2);
    CHECK_FALSE(has_component(pe, "Shared expert momentum (fp32)"));
    CHECK(p.state_bytes - pe.state_bytes == 4 * 2 * (3 * 48 * 32 + 32));
}
