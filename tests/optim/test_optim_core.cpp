// Optimizer-level properties: fused weight decay survives bf16 (docs/design.md "Weight decay"),
// stochastic write-back equals the fp32 step in expectation, resumed equals uninterrupted, rounding
// streams are distinct per tensor, 64-bit element indexing, skipped parameters, and the state the
// optimizers touch is exactly the memory plan's (paper Eq. 2, Appendix B).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/error.h"
#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "optim/optimizer.h"
#include "plan/plan.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using test::make_param;
using test::TensorSet;

namespace {

float gauss(uint32_t tensor, uint64_t i, float scale) { return scale * philox_normal(PhiloxKey{7, 99}, 0, tensor, i); }

/// A bf16 backbone matrix, an fp32 vector, a bf16 expert stack and an fp32 router.
TensorSet small_model(int64_t rows = 16, int64_t cols = 24) {
    TensorSet ts;
    ts.add(make_param("blocks.0.attn.q", {rows, cols}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    ts.add(make_param("blocks.0.ln1.weight", {cols}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 1));
    ts.add(make_param("blocks.1.moe.experts.w1", {3, rows, cols}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 2));
    ts.add(make_param("blocks.1.moe.router", {4, cols}, DType::F32, Tier::ROUTER, Role::ROUTER, 3));
    return ts;
}

void fill(TensorSet& ts, uint32_t salt) {
    for (size_t t = 0; t < ts.infos.size(); ++t)
        for (int64_t i = 0; i < ts.infos[t].numel(); ++i) {
            ts.set_weight(t, i, gauss(uint32_t(t), uint64_t(i), 0.5f));
            ts.grads[t][size_t(i)] = gauss(uint32_t(100 + t + salt), uint64_t(i), 0.01f);
        }
}

void set_grads(TensorSet& ts, int step) {
    for (size_t t = 0; t < ts.infos.size(); ++t)
        for (int64_t i = 0; i < ts.infos[t].numel(); ++i)
            ts.grads[t][size_t(i)] = gauss(uint32_t(1000 + 10 * step + t), uint64_t(i), 0.01f);
}

std::vector<uint32_t> snapshot(const TensorSet& ts) {
    std::vector<uint32_t> out;
    for (size_t t = 0; t < ts.infos.size(); ++t) {
        for (uint16_t v : ts.w16[t]) out.push_back(v);
        for (float v : ts.w32[t]) {
            uint32_t u;
            std::memcpy(&u, &v, 4);
            out.push_back(u);
        }
    }
    for (const auto& b : ts.state.buffers)
        for (float v : b) {
            uint32_t u;
            std::memcpy(&u, &v, 4);
            out.push_back(u);
        }
    return out;
}

}  // namespace

TEST_CASE("weight decay survives: 100 steps of pure decay on bf16 weights shrink as in fp32") {
    const double lr = 1e-3, wd = 0.05;  // lr*wd = 5e-5, 39x below 2^-9: RNE loses all of it
    const double expected = std::pow(1.0 - lr * wd, 100);
    for (Rounding mode : {Rounding::STOCHASTIC, Rounding::NEAREST}) {
        for (WeightDecayMode wdm : {WeightDecayMode::FUSED, WeightDecayMode::BF16_PREMULTIPLY}) {
            for (const char* name : {"skewadam", "adamw", "lion", "adafactor"}) {
                const bool decisive = mode == Rounding::STOCHASTIC && wdm == WeightDecayMode::FUSED;
                if (!decisive && std::string(name) != "adamw") continue;  // the lost-decay modes: one optimizer
                OptimizerConfig opt = builtin_optimizer(name);
                opt.rounding = mode;
                opt.weight_decay_mode = wdm;
                opt.weight_decay = wd;
                for (auto& t : opt.tiers) t.weight_decay = wd;
                TensorSet ts;
                ts.add(make_param("w", {256, 256}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
                ts.add(make_param("g", {256}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 1));
                ts.bind(opt);
                for (int64_t i = 0; i < 256 * 256; ++i)
                    ts.set_weight(0, i, 0.02f + std::fabs(gauss(0, uint64_t(i), 0.02f)));
                for (int64_t i = 0; i < 256; ++i) ts.set_weight(1, i, 1.0f);
                std::vector<float> w0(256 * 256);
                for (int64_t i = 0; i < 256 * 256; ++i) w0[size_t(i)] = ts.weight(0, i);
                for (int s = 1; s <= 100; ++s) optimizer_step(opt, ts.slots, OptimStep{s, lr, 42});  // grads are zero
                double ratio = 0;
                for (int64_t i = 0; i < 256 * 256; ++i) ratio += double(ts.weight(0, i)) / double(w0[size_t(i)]);
                ratio /= 256.0 * 256.0;
                INFO(name << " rounding " << choice_name(mode) << " premultiply "
                          << (wdm == WeightDecayMode::BF16_PREMULTIPLY) << " mean ratio " << ratio << " fp32 "
                          << expected);
                // fp32 params decay exactly in every mode.
                CHECK(std::fabs(double(ts.weight(1, 0)) - expected) < 1e-6);
                if (mode == Rounding::STOCHASTIC && wdm == WeightDecayMode::FUSED) {
                    CHECK(std::fabs(ratio - expected) < 5e-4);  // ~6 standard errors; the shrink is 5e-3
                } else {
                    CHECK(ratio == 1.0);  // the paper's trainer: the decay rounds to a no-op
                }
            }
        }
    }
}

TEST_CASE("stochastic write-back equals the fp32 step in expectation") {
    for (const char* name : {"skewadam", "adamw", "lion", "muon", "adafactor"}) {
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rounding = Rounding::STOCHASTIC;
        const int64_t rows = 8, cols = 6, n = rows * cols;
        const int draws = 2000;
        std::vector<double> mean(static_cast<size_t>(n), 0.0);
        std::vector<float> exact(static_cast<size_t>(n));
        for (int d = 0; d <= draws; ++d) {
            TensorSet ts;  // d == draws: the same step on an fp32 twin (exact, no rounding)
            ts.add(
                make_param("w", {rows, cols}, d == draws ? DType::F32 : DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
            ts.bind(opt);
            for (int64_t i = 0; i < n; ++i) {
                ts.set_weight(0, i, bf16_to_f32(f32_to_bf16(gauss(0, uint64_t(i), 1.0f))));  // twin starts equal
                ts.grads[0][size_t(i)] = gauss(1, uint64_t(i), 1.0f);
            }
            optimizer_step(opt, ts.slots, OptimStep{1, 0.003, uint64_t(1000 + d)});
            for (int64_t i = 0; i < n; ++i) {
                if (d == draws) exact[size_t(i)] = ts.weight(0, i);
                else mean[size_t(i)] += ts.weight(0, i) / double(draws);
            }
        }
        for (int64_t i = 0; i < n; ++i) {
            float w = bf16_to_f32(f32_to_bf16(gauss(0, uint64_t(i), 1.0f)));
            int e;
            std::frexp(std::fabs(w), &e);
            double ulp = std::ldexp(1.0, e - 8);
            INFO(name << " element " << i << " mean " << mean[size_t(i)] << " fp32 " << exact[size_t(i)]);
            // Standard error <= ulp/2/sqrt(draws) = 0.011 ulp; allow 6 of them.
            CHECK(std::fabs(mean[size_t(i)] - double(exact[size_t(i)])) <= 0.07 * ulp);
        }
    }
}

TEST_CASE("a resumed run equals an uninterrupted one, bit for bit, for every optimizer") {
    for (const std::string& name : builtin_optimizer_names()) {
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rank = 4;
        opt.update_proj_gap = 2;
        INFO(name);
        TensorSet a = small_model();
        a.bind(opt);
        fill(a, 0);
        for (int s = 1; s <= 5; ++s) {
            set_grads(a, s);
            optimizer_step(opt, a.slots, OptimStep{s, 1e-3 * s, 42});
        }
        TensorSet b = small_model();
        b.bind(opt);
        fill(b, 0);
        for (int s = 1; s <= 3; ++s) {
            set_grads(b, s);
            optimizer_step(opt, b.slots, OptimStep{s, 1e-3 * s, 42});
        }
        TensorSet c = small_model();  // a fresh process: weights and state from the checkpoint
        c.bind(opt);
        c.w16 = b.w16;
        c.w32 = b.w32;
        c.bind(opt);  // re-bind to the copied weight storage (state reallocated, zero)
        REQUIRE(c.state.buffers.size() == b.state.buffers.size());
        for (size_t i = 0; i < b.state.buffers.size(); ++i) c.state.buffers[i] = b.state.buffers[i];
        for (int s = 4; s <= 5; ++s) {
            set_grads(c, s);
            optimizer_step(opt, c.slots, OptimStep{s, 1e-3 * s, 42});
        }
        CHECK(snapshot(a) == snapshot(c));
    }
}

TEST_CASE("rounding noise differs across tensors and steps inside the optimizer") {
    OptimizerConfig opt = builtin_optimizer("adamw");
    opt.rounding = Rounding::STOCHASTIC;
    TensorSet ts;
    ts.add(make_param("a", {64, 64}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    ts.add(make_param("b", {64, 64}, DType::BF16, Tier::BACKBONE, Role::ATTN_K, 1));
    ts.bind(opt);
    for (int64_t i = 0; i < 64 * 64; ++i) {
        float w = gauss(0, uint64_t(i), 1.0f), g = gauss(1, uint64_t(i), 1.0f);
        ts.set_weight(0, i, w);
        ts.set_weight(1, i, w);
        ts.grads[0][size_t(i)] = g;
        ts.grads[1][size_t(i)] = g;
    }
    optimizer_step(opt, ts.slots, OptimStep{1, 0.003, 42});
    int64_t differ = 0;
    for (int64_t i = 0; i < 64 * 64; ++i) differ += ts.w16[0][size_t(i)] != ts.w16[1][size_t(i)];
    // Identical inputs, different tensor ids: independent rounding decisions in a large share.
    CHECK(differ > 64 * 64 / 10);
}

TEST_CASE("64-bit element indexing: a view deep inside a tensor of 2^33 elements") {
    const int64_t big = (int64_t(1) << 33) + 64;
    for (const char* name : {"adamw", "lion"}) {
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rounding = Rounding::STOCHASTIC;
        ParamInfo p = make_param("huge", {big}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 5);
        p.shape = {int64_t(1) << 17, (int64_t(1) << 16) + 0};  // a (2^17, 2^16) matrix: 2^33 elements
        const int64_t begin = (int64_t(1) << 32) + (int64_t(1) << 31) - 7,
                      count = 33;  // crosses 2^32 + 2^31, unaligned to Philox groups of 4
        std::vector<uint16_t> w(count);
        std::vector<float> g(count), m(count, 0.0f), v(count, 0.0f);
        for (int64_t i = 0; i < count; ++i) {
            w[size_t(i)] = f32_to_bf16(gauss(0, uint64_t(i), 1.0f)).bits;
            g[size_t(i)] = gauss(1, uint64_t(i), 1.0f);
        }
        std::vector<uint16_t> w0 = w;
        ParamSlot s;
        s.info = &p;
        s.weight = w.data();
        s.grad = g.data();
        s.grad_dtype = DType::F32;
        s.state[size_t(StateKind::MOMENTUM)] = m.data();
        s.state[size_t(StateKind::SECOND_FULL)] = v.data();
        s.view_begin = begin;
        s.view_count = count;
        ParamSlot one[] = {s};
        const double lr = 0.003;
        optimizer_step(opt, one, OptimStep{3, lr, 42});
        int64_t truncated_agrees = 0;
        for (int64_t i = 0; i < count; ++i) {
            // Expected: the per-element math, rounded with the noise of element begin + i (64-bit).
            float mm = 0, vv = 0, u;
            if (std::string(name) == "adamw")
                u = adamw_element(g[size_t(i)], mm, vv, 0.9f, float(1 - 0.9), 0.999f, float(1 - 0.999),
                                  float(1 / (1 - std::pow(0.9, 3))), float(1 / std::sqrt(1 - std::pow(0.999, 3))),
                                  1e-8f);
            else u = lion_element(g[size_t(i)], mm, 0.9f, float(1 - 0.9), float(opt.beta2), float(1 - opt.beta2));
            float x =
                optim_decayed_target(bf16_to_f32(bf16{w0[size_t(i)]}), float(1 - lr * opt.weight_decay), float(lr), u);
            uint16_t want = bf16_write_back(x, ROUNDING_STOCHASTIC, 42, 3, 5, uint64_t(begin + i)).bits;
            uint16_t trunc = bf16_write_back(x, ROUNDING_STOCHASTIC, 42, 3, 5, uint64_t(uint32_t(begin + i))).bits;
            CHECK(w[size_t(i)] == want);
            CHECK(m[size_t(i)] == mm);
            truncated_agrees += trunc == w[size_t(i)];
        }
        CHECK(truncated_agrees < count);  // the check can tell a 32-bit index from the 64-bit one
    }
    // Factored coordinates of an expert bank of 128 x 4096 x 4096 = 2^31 elements, past 2^31.
    MatrixCoord c = optim_matrix_coord((int64_t(1) << 31) - 1, 4096, 4096);
    CHECK((c.matrix == 127 && c.row == 4095 && c.col == 4095));
    c = optim_matrix_coord((int64_t(3) << 31) + 4096 * 5 + 7, 4096, 4096);
    CHECK((c.matrix == 384 && c.row == 5 && c.col == 7));
}

TEST_CASE("a parameter without a gradient is not stepped at all") {
    OptimizerConfig opt = builtin_optimizer("skewadam");
    TensorSet ts = small_model();
    ts.bind(opt);
    fill(ts, 0);
    auto before = snapshot(ts);
    for (auto& s : ts.slots) s.grad = nullptr;
    optimizer_step(opt, ts.slots, OptimStep{1, 1e-3, 42});
    CHECK(snapshot(ts) == before);
}

TEST_CASE("tier policy: vectors get a full second moment, presets differ as in Table 3") {
    ParamInfo vec = make_param("v", {8}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 0);
    ParamInfo ex = make_param("e", {4, 8, 8}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 1);
    ParamInfo rt = make_param("r", {4, 8}, DType::F32, Tier::ROUTER, Role::ROUTER, 2);
    CHECK(param_policy(builtin_optimizer("skewadam"), vec).second_moment == SecondMomentKind::FULL);
    CHECK(param_policy(builtin_optimizer("skewadam"), ex).momentum == MomentumKind::NONE);
    CHECK(param_policy(builtin_optimizer("skewadam-expert-momentum"), ex).momentum == MomentumKind::FP32);
    CHECK(param_policy(builtin_optimizer("skewadam"), rt).second_moment == SecondMomentKind::FULL);
    CHECK(param_policy(builtin_optimizer("skewadam-factored-router"), rt).second_moment == SecondMomentKind::FACTORED);
    CHECK(param_policy(builtin_optimizer("skewadam"), rt).weight_decay == 0.0);
    CHECK(param_policy(builtin_optimizer("adamw"), rt).weight_decay == 0.0);
    CHECK(param_policy(builtin_optimizer("muon"), rt).muon_adam);
    CHECK_FALSE(param_policy(builtin_optimizer("muon"), ex).muon_adam);
    // an unknown type cannot reach the optimizer: the config refuses it, naming the key and the table's names
    CHECK_THROWS_WITH(load_config_text("optimizers:\n  x:\n    type: adamx\ntrain:\n  optimizers: [x]\n", "t.yaml"),
                      Catch::Contains("adamx") && Catch::Contains("galore-paper"));
}

TEST_CASE("optimizer state bytes equal the memory plan's, for every optimizer on the paper's model") {
    ParamTable table = build_param_table(ModelConfig{});
    for (const std::string& name : builtin_optimizer_names()) {
        OptimizerConfig opt = builtin_optimizer(name);
        INFO(name);
        int64_t plan_bytes = 0;
        for (const BufferSpec& b : optimizer_state_buffers(opt, table)) plan_bytes += b.bytes();
        CHECK(optimizer_state_bytes(opt, table) == plan_bytes);
        // Per tensor and kind, not only in total.
        std::vector<BufferSpec> bufs = optimizer_state_buffers(opt, table);
        size_t k = 0;
        for (const ParamInfo& p : table.params)
            for (const StateSlotSpec& s : optimizer_param_state(opt, p)) {
                REQUIRE(k < bufs.size());
                CHECK(bufs[k].param == int(p.index));
                CHECK(bufs[k].state == s.kind);
                CHECK(bufs[k].numel() == s.numel());
                ++k;
            }
        CHECK(k == bufs.size());
    }
    // The paper's Table 1 / Appendix B figures (GiB).
    auto gib = [&](const char* n) { return double(optimizer_state_bytes(builtin_optimizer(n), table)) / GIB; };
    CHECK(std::fabs(gib("skewadam") - 1.29) < 0.01);
    CHECK(std::fabs(gib("adamw") - 50.55) < 0.01);
    CHECK(std::fabs(gib("lion") - 25.27) < 0.01);
    CHECK(std::fabs(gib("adafactor") - 0.01) < 0.01);
}

TEST_CASE("state bound from the arena: one step on a small model through the plan's buffers") {
    Config cfg;
    cfg.model.d_model = 64;
    cfg.model.n_heads = 4;
    cfg.model.n_kv_heads = 2;
    cfg.model.d_ff = 64;
    cfg.model.d_expert = 32;
    cfg.model.n_experts = 4;
    cfg.model.vocab_size = 100;
    cfg.model.padded_vocab_size = 128;
    cfg.model.max_seq_len = 16;
    cfg.train.seq_len = 16;
    cfg.train.batch_size = 2;
    cfg.train.microbatch = 1;
    cfg.runtime.workspace_gib = 1.0 / 1024;  // 1 MiB: the arena is zero-filled per optimizer
    ParamTable table = build_param_table(cfg.model);
    for (const std::string& name : builtin_optimizer_names()) {
        INFO(name);
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rank = 8;
        MemoryPlan plan = build_memory_plan(cfg, table, opt, 1);
        Arena arena = allocate_host_arena(plan);
        std::vector<ParamSlot> slots = arena_param_slots(opt, table, arena);
        for (size_t i = 0; i < slots.size(); ++i) {
            const ParamInfo& p = table.params[i];
            CHECK(slots[i].weight == arena.ptr("weight." + p.name));
            // Small nonzero gradients so every path runs.
            void* gp = arena.ptr("grad." + p.name);
            for (int64_t k = 0; k < p.numel(); ++k) {
                float gv = 0.01f * float((k % 7) - 3);
                if (slots[i].grad_dtype == DType::F32) static_cast<float*>(gp)[k] = gv;
                else static_cast<bf16*>(gp)[k] = f32_to_bf16(gv);
            }
        }
        // The expected result, independently of the arena binding: the same step on host copies of
        // the weights and gradients with host state (allocate_host_state).
        std::vector<std::vector<unsigned char>> hw(slots.size()), hg(slots.size());
        std::vector<ParamSlot> host = slots;
        for (size_t i = 0; i < slots.size(); ++i) {
            const ParamInfo& p = table.params[i];
            const auto* w = static_cast<const unsigned char*>(slots[i].weight);
            const auto* g = static_cast<const unsigned char*>(slots[i].grad);
            hw[i].assign(w, w + p.bytes());
            hg[i].assign(g, g + p.numel() * (slots[i].grad_dtype == DType::F32 ? 4 : 2));
            host[i].weight = hw[i].data();
            host[i].grad = hg[i].data();
            host[i].state = {};
        }
        HostOptimState host_state;
        allocate_host_state(opt, host, host_state);
        REQUIRE_NOTHROW(optimizer_step(opt, slots, OptimStep{1, 1e-3, 42}));
        optimizer_step(opt, host, OptimStep{1, 1e-3, 42});
        int64_t moved = 0;
        for (size_t i = 0; i < slots.size(); ++i) {
            const ParamInfo& p = table.params[i];
            INFO("tensor " << p.name);
            CHECK(std::memcmp(slots[i].weight, hw[i].data(), size_t(p.bytes())) == 0);
            for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
                INFO("state " << int(spec.kind));
                REQUIRE(slots[i].st(spec.kind) != nullptr);
                CHECK(std::memcmp(slots[i].st(spec.kind), host[i].st(spec.kind), size_t(spec.numel()) * 4) == 0);
            }
            const auto* w = static_cast<const unsigned char*>(slots[i].weight);
            for (int64_t b = 0; b < p.bytes(); ++b) moved += w[b] != 0;  // the arena's weights started at 0
        }
        CHECK(moved > 0);  // the step changed weights: the comparison is not of two untouched arenas
        OptimizerConfig other = builtin_optimizer(std::string(name) == "adamw" ? "lion" : "adamw");
        if (other.type != opt.type) CHECK_THROWS_AS(bind_arena_state(other, table, arena, slots), skew::Error);
    }
}
