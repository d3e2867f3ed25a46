// Expert-parallel shards of an expert bank (docs/distributed.md, "Expert parallel"): a rank that
// holds experts [offset, offset + E/M) steps and initializes them exactly as one process does the
// same experts of the whole bank, because every Philox key uses the global element index
// (ParamInfo::element_offset). Each optimizer, bf16 weights with stochastic rounding, three steps.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/common/philox.h"
#include "optim_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

constexpr int64_t E = 4, ROWS = 8, COLS = 16, PER = ROWS * COLS;

ParamInfo bank(int64_t experts, int64_t offset) {
    ParamInfo p =
        make_param("blocks.1.moe.experts.w1", {experts, ROWS, COLS}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 11);
    p.expert_offset = offset;
    return p;
}

float draw(uint32_t stream, int64_t step, int64_t i) {
    return philox_normal(PhiloxKey{99, stream}, uint32_t(step), 5, uint64_t(i));
}

/// Weights after `steps` steps of `opt` on experts [offset, offset + count) of a bank of E,
/// weights and gradients of global element g drawn from Philox (the same in every run).
std::vector<uint16_t> run(const OptimizerConfig& opt, int64_t offset, int64_t count, int steps) {
    TensorSet ts;
    ts.add(bank(count, offset));
    ts.bind(opt);
    const int64_t base = offset * PER;
    for (int64_t i = 0; i < count * PER; ++i) ts.set_weight(0, i, 0.05f * draw(1, 0, base + i));
    for (int t = 1; t <= steps; ++t) {
        for (int64_t i = 0; i < count * PER; ++i) ts.grads[0][size_t(i)] = 0.01f * draw(2, t, base + i);
        OptimStep st;
        st.t = t;
        st.lr = 1e-2;
        st.seed = 7;
        optimizer_step(opt, ts.slots, st);
    }
    return ts.w16[0];
}

}  // namespace

TEST_CASE("an expert-parallel shard's optimizer step equals the whole bank's on the same experts, bit for bit") {
    for (const std::string name : {"skewadam", "adamw", "lion", "muon", "adafactor", "galore", "galore-paper"}) {
        INFO(name);
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rounding = Rounding::STOCHASTIC;
        if (name == "galore" || name == "galore-paper") opt.rank = 4;
        const std::vector<uint16_t> whole = run(opt, 0, E, 3);
        for (int64_t M : {2, 4}) {
            const int64_t el = E / M;
            for (int64_t r = 0; r < M; ++r) {
                const std::vector<uint16_t> shard = run(opt, r * el, el, 3);
                CHECK(std::memcmp(shard.data(), whole.data() + r * el * PER, size_t(el * PER) * 2) == 0);
            }
        }
    }
}

TEST_CASE("a shard keyed by local element indices would differ (the test above can fail)") {
    OptimizerConfig opt = builtin_optimizer("adamw");
    opt.rounding = Rounding::STOCHASTIC;
    const std::vector<uint16_t> whole = run(opt, 0, E, 2);
    // experts 2..3 stepped as if they were experts 0..1 of their own bank, weights and grads equal
    TensorSet ts;
    ts.add(bank(2, 0));
    ts.bind(opt);
    for (int64_t i = 0; i < 2 * PER; ++i) ts.set_weight(0, i, 0.05f * draw(1, 0, 2 * PER + i));
    for (int t = 1; t <= 2; ++t) {
        for (int64_t i = 0; i < 2 * PER; ++i) ts.grads[0][size_t(i)] = 0.01f * draw(2, t, 2 * PER + i);
        OptimStep st;
        st.t = t;
        st.lr = 1e-2;
        st.seed = 7;
        optimizer_step(opt, ts.slots, st);
    }
    CHECK(std::memcmp(ts.w16[0].data(), whole.data() + 2 * PER, size_t(2 * PER) * 2) != 0);
}
