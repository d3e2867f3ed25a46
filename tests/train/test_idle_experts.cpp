// An expert that got no token in a step is skipped by default, as in the paper's released trainer
// (train/idle_experts.h, docs/optimizers.md "Experts that got no token"): its weights and every
// optimizer state end the step bit-identical, while the other experts of the bank move.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "kernels/backend.h"
#include "tests/optim/optim_test_util.h"
#include "train/idle_experts.h"

using namespace skew;
using namespace skew::test;

namespace {
constexpr int64_t E = 3, ROWS = 8, COLS = 16, IDLE = 1;

// The bytes of expert e's slice (1/E of the tensor) of `n` bytes at p.
std::vector<std::byte> slice(const void* p, int64_t n, int64_t e) {
    const auto* b = static_cast<const std::byte*>(p) + e * (n / E);
    return std::vector<std::byte>(b, b + n / E);
}

struct Bank {
    TensorSet ts;
    OptimizerConfig opt;
    explicit Bank(const std::string& name) : opt(builtin_optimizer(name)) {
        opt.weight_decay = 0.1;
        for (auto& tier : opt.tiers) tier.weight_decay = 0.1;
        ParamInfo p =
            make_param("blocks.1.moe.experts.w1", {E, ROWS, COLS}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 0);
        p.block = 1;
        ts.add(p);
        ts.bind(opt);
        std::mt19937 gen(7);
        std::normal_distribution<float> n(0.0f, 0.02f);
        for (int64_t i = 0; i < p.numel(); ++i) ts.set_weight(0, i, n(gen));
        fill_grads(1.0f, gen);
    }
    void fill_grads(float idle_scale, std::mt19937& gen) {
        std::normal_distribution<float> n(0.0f, 1e-2f);
        for (int64_t i = 0; i < E * ROWS * COLS; ++i)
            ts.grads[0][size_t(i)] = n(gen) * (i / (ROWS * COLS) == IDLE ? idle_scale : 1.0f);
    }
    // Every slice of expert e: weight bytes, then each bound state's.
    std::vector<std::vector<std::byte>> expert(int64_t e) const {
        const ParamSlot& s = ts.slots[0];
        std::vector<std::vector<std::byte>> out{slice(s.weight, s.info->bytes(), e)};
        for (const auto& spec : optimizer_param_state(opt, *s.info))
            if (s.st(spec.kind)) out.push_back(slice(s.st(spec.kind), spec.numel() * 4, e));
        return out;
    }
};
}  // namespace

TEST_CASE("an expert with no token in any microbatch of the step is idle, one token in one microbatch is enough") {
    ExpertTokenCounts c;
    MoeStats a{1, {3, 0, 0, 1}}, b{1, {0, 0, 2, 0}}, a3{3, {0, 5, 5, 5}}, b3{3, {0, 0, 0, 0}};
    add_expert_tokens(c, {a, a3});
    add_expert_tokens(c, {b, b3});
    const auto idle = idle_experts(c);
    REQUIRE(idle.size() == 2);
    CHECK((idle[0].block == 1 && idle[0].expert == 1));
    CHECK((idle[1].block == 3 && idle[1].expert == 0));
    CHECK(Config{}.train.idle_experts == IdleExperts::SKIP);  // the paper's trainer's behaviour is the default
}

TEST_CASE("skip leaves an idle expert's weights and state bit-identical, step decays them, other experts move") {
    auto backend = make_cpu_backend();
    for (const char* name :
         {"skewadam", "skewadam-expert-momentum", "adamw", "lion", "adafactor", "muon", "galore-paper"}) {
        for (const bool skip : {true, false}) {
            INFO(name << (skip ? ", skip" : ", step with a zero gradient"));
            Bank bank(name);
            std::mt19937 gen(11);
            optimizer_step(bank.opt, bank.ts.slots, OptimStep{1, 1e-3, 42});  // every expert has state now
            bank.fill_grads(0.0f, gen);                                       // expert IDLE got no token
            const auto idle_before = bank.expert(IDLE), busy_before = bank.expert(0);
            const std::vector<IdleExpert> idle = {{1, IDLE}};
            IdleExpertSnapshot snap =
                skip ? save_idle_experts(*backend, bank.opt, bank.ts.slots, idle) : IdleExpertSnapshot{};
            optimizer_step(bank.opt, bank.ts.slots, OptimStep{2, 1e-3, 42});
            restore_idle_experts(*backend, snap);
            const auto idle_after = bank.expert(IDLE), busy_after = bank.expert(0);
            CHECK(busy_after[0] != busy_before[0]);  // the busy expert's weights moved
            if (skip) {
                CHECK(snap.pieces.size() == idle_before.size());
                for (size_t i = 0; i < idle_before.size(); ++i) {
                    INFO("slice " << i << " (0 = weight, then states in kind order)");
                    CHECK(idle_after[i] == idle_before[i]);
                }
            } else {
                // zero gradient: weight decay or a decaying moment changes something of the expert
                bool changed = false;
                for (size_t i = 0; i < idle_before.size(); ++i) changed = changed || idle_after[i] != idle_before[i];
                CHECK(changed);
            }
        }
    }
}

TEST_CASE("idle-expert snapshots ignore other blocks and refuse an expert outside the bank") {
    auto backend = make_cpu_backend();
    Bank bank("adamw");
    CHECK(save_idle_experts(*backend, bank.opt, bank.ts.slots, {{2, 0}}).pieces.empty());
    CHECK_THROWS_WITH(save_idle_experts(*backend, bank.opt, bank.ts.slots, {{1, E}}),
                      Catch::Contains("expert 3 of block 1 is outside 'blocks.1.moe.experts.w1' (3 experts)"));
}
