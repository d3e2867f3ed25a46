// The global-norm clip folded into the optimizer step (OptimStep::grad_scale): reading each gradient
// as g * grad_scale must give exactly the step on gradients rescaled beforehand in fp32 (the
// separate pass it replaces), for every optimizer that folds it; Muon and GaLore refuse a scale.
#include <catch2/catch.hpp>

#include <cstring>

#include "engine/config.h"
#include "engine/error.h"
#include "kernels/common/philox.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using test::make_param;
using test::TensorSet;

namespace {

void add_params(TensorSet& ts) {
    ts.add(make_param("q", {24, 40}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    ts.add(make_param("experts", {2, 16, 24}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 1));
    ts.add(make_param("router", {4, 40}, DType::F32, Tier::ROUTER, Role::ROUTER, 2));
    ts.add(make_param("ln", {40}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 3));
}

float noise(uint32_t t, uint64_t i, float s) { return s * philox_normal(PhiloxKey{9, 99}, 0, t, i); }

}  // namespace

TEST_CASE("folded clip coefficient equals rescaling the gradients first, bit for bit") {
    for (const char* name : {"skewadam", "uniform", "adamw", "lion", "adafactor"}) {
        INFO(name);
        OptimizerConfig opt = builtin_optimizer(name);
        REQUIRE(optimizer_folds_grad_scale(opt));
        TensorSet pre, fold;
        add_params(pre);
        add_params(fold);
        pre.bind(opt);
        fold.bind(opt);
        for (size_t t = 0; t < pre.infos.size(); ++t)
            for (int64_t i = 0; i < pre.infos[t].numel(); ++i) {
                pre.set_weight(t, i, noise(uint32_t(t), uint64_t(i), 0.3f));
                fold.set_weight(t, i, noise(uint32_t(t), uint64_t(i), 0.3f));
            }
        for (int step = 1; step <= 3; ++step) {
            const float scale = step == 2 ? 1.0f : 0.173f * float(step);
            for (size_t t = 0; t < pre.infos.size(); ++t)
                for (int64_t i = 0; i < pre.infos[t].numel(); ++i) {
                    const float g = noise(uint32_t(100 * step + t), uint64_t(i), 0.05f);
                    fold.grads[t][size_t(i)] = g;
                    pre.grads[t][size_t(i)] = g * scale;  // the separate rescale pass, in fp32
                }
            OptimStep st{step, 2e-3, 42};
            optimizer_step(opt, pre.slots, st);
            st.grad_scale = scale;
            optimizer_step(opt, fold.slots, st);
        }
        for (size_t t = 0; t < pre.infos.size(); ++t) {
            INFO(pre.infos[t].name);
            int64_t differ = 0;
            for (int64_t i = 0; i < pre.infos[t].numel(); ++i) {
                const float a = pre.weight(t, i), b = fold.weight(t, i);
                differ += std::memcmp(&a, &b, 4) != 0;
            }
            CHECK(differ == 0);
            for (const StateSlotSpec& s : optimizer_param_state(opt, pre.infos[t]))
                CHECK(std::memcmp(pre.slots[t].st(s.kind), fold.slots[t].st(s.kind), size_t(s.numel()) * 4) == 0);
        }
        // and the scale changes the result (the test would notice a scale that is ignored)
        TensorSet other;
        add_params(other);
        other.bind(opt);
        for (size_t t = 0; t < other.infos.size(); ++t)
            for (int64_t i = 0; i < other.infos[t].numel(); ++i) {
                other.set_weight(t, i, noise(uint32_t(t), uint64_t(i), 0.3f));
                other.grads[t][size_t(i)] = noise(uint32_t(100 + t), uint64_t(i), 0.05f);
            }
        OptimStep st{1, 2e-3, 42};
        st.grad_scale = 0.173f;
        TensorSet unscaled;
        add_params(unscaled);
        unscaled.bind(opt);
        for (size_t t = 0; t < unscaled.infos.size(); ++t)
            for (int64_t i = 0; i < unscaled.infos[t].numel(); ++i) {
                unscaled.set_weight(t, i, noise(uint32_t(t), uint64_t(i), 0.3f));
                unscaled.grads[t][size_t(i)] = noise(uint32_t(100 + t), uint64_t(i), 0.05f);
            }
        optimizer_step(opt, other.slots, st);
        optimizer_step(opt, unscaled.slots, OptimStep{1, 2e-3, 42});
        CHECK(std::memcmp(other.slots[0].st(optimizer_param_state(opt, other.infos[0]).front().kind),
                          unscaled.slots[0].st(optimizer_param_state(opt, unscaled.infos[0]).front().kind),
                          size_t(optimizer_param_state(opt, other.infos[0]).front().numel()) * 4) != 0);
    }
}

TEST_CASE("Muon and GaLore refuse a folded gradient scale (the caller rescales)") {
    for (const char* name : {"muon", "galore"}) {
        OptimizerConfig opt = builtin_optimizer(name);
        CHECK_FALSE(optimizer_folds_grad_scale(opt));
        TensorSet ts;
        add_params(ts);
        ts.bind(opt);
        OptimStep st{1, 1e-3, 42};
        st.grad_scale = 0.5f;
        CHECK_THROWS_WITH(optimizer_step(opt, ts.slots, st), Catch::Contains("does not fold a gradient scale"));
        st.grad_scale = 1.0f;
        CHECK_NOTHROW(optimizer_step(opt, ts.slots, st));
    }
}
