// Golden tests. (1) 5 steps of every optimizer on a bf16 matrix, an fp32 vector, a bf16 expert stack
// and an fp32 router against tests/reference/optim/make_golden.py (torch, written from the
// equations), with rounding: nearest. Tolerances: bf16 weights within 1 bf16 ulp (and >= 90%
// bit-identical); fp32 weights |d| <= 2e-5 + 1e-5|w|; state |d| <= 1e-4|x| + 1e-5 max|x| per tensor.
// (2) References independent of skew's code (make_adamw_torch.py): AdamW from torch.optim.AdamW and
// Lion from its paper's Algorithm 2, every step's weights with rounding to nearest (bf16 within 1 ulp,
// >= 97% bit-identical), and AdamW with stochastic rounding against torch's fp32 trajectory in
// expectation.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "optim/optimizer.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using nlohmann::json;

namespace {

const json& golden() {
    static json j = [] {
        std::ifstream f(std::string(SKEW_SOURCE_DIR) + "/tests/reference/optim/optim_golden.json");
        REQUIRE(f.good());
        return json::parse(f);
    }();
    return j;
}

Tier tier_of(const std::string& s) {
    return s == "backbone" ? Tier::BACKBONE : s == "experts" ? Tier::EXPERTS : Tier::ROUTER;
}
Role role_of(const std::string& s) {
    if (s == "attn_q") return Role::ATTN_Q;
    if (s == "norm_weight") return Role::NORM_WEIGHT;
    if (s == "expert_w1") return Role::EXPERT_W1;
    return Role::ROUTER;
}
const char* kind_key(StateKind k) {
    switch (k) {
        case StateKind::MOMENTUM: return "MOMENTUM";
        case StateKind::SECOND_FULL: return "SECOND_FULL";
        case StateKind::SECOND_ROW: return "SECOND_ROW";
        case StateKind::SECOND_COL: return "SECOND_COL";
        case StateKind::ADAM_M: return "ADAM_M";
        case StateKind::ADAM_V: return "ADAM_V";
        case StateKind::GALORE_P: return "GALORE_P";
        case StateKind::GALORE_Q: return "GALORE_Q";
        case StateKind::GALORE_M: return "GALORE_M";
        case StateKind::GALORE_V: return "GALORE_V";
    }
    return "?";
}

OptimizerConfig config_from(const std::string& name, const json& c) {
    OptimizerConfig o;
    o.name = name;
    o.type = *parse_choice<OptimizerType>(c["type"].get<std::string>());
    o.lr = c["lr"];
    o.beta1 = c["beta1"];
    o.beta2 = c["beta2"];
    o.eps = c["eps"];
    o.weight_decay = c["weight_decay"];
    o.rounding = Rounding::NEAREST;
    if (c.contains("tiers")) {
        for (const char* t : {"backbone", "experts", "router"}) {
            const json& tp = c["tiers"][t];
            TierPolicy& p = o.tiers[size_t(tier_of(t))];
            p.momentum = tp[0] == "fp32" ? MomentumKind::FP32 : MomentumKind::NONE;
            p.second_moment = tp[1] == "factored" ? SecondMomentKind::FACTORED
                              : tp[1] == "full"   ? SecondMomentKind::FULL
                                                  : SecondMomentKind::NONE;
            p.weight_decay = tp[2];
        }
    }
    if (c.contains("muon_momentum")) {
        o.muon_momentum = c["muon_momentum"];
        o.ns_steps = c["ns_steps"];
        o.nesterov = c["nesterov"];
        o.shape_scale = c["shape_scale"];
        o.ema_momentum = c["ema_momentum"];
        o.adam_lr = c["adam_lr"];
    }
    if (c.contains("decay_rate")) {
        o.decay_rate = c["decay_rate"];
        o.eps1 = c["eps1"];
        o.update_clip = c["update_clip"];
    }
    if (c.contains("rank")) o.rank = c["rank"];
    if (c.contains("update_proj_gap")) o.update_proj_gap = c["update_proj_gap"];
    if (c.contains("galore_scale")) o.galore_scale = c["galore_scale"];
    return o;
}

float bf16_ulp(float x) {
    float a = std::fabs(x);
    if (a < 1e-30f) return 1e-30f;
    int e;
    std::frexp(a, &e);
    return std::ldexp(1.0f, e - 8);
}

void run_golden(const std::string& name) {
    const json& g = golden();
    const json& og = g["optimizers"][name];
    OptimizerConfig opt = config_from(name, og["config"]);
    test::TensorSet ts;
    for (const json& p : g["params"])
        ts.add(test::make_param(p["name"], p["shape"].get<std::vector<int64_t>>(),
                                p["dtype"] == "bf16" ? DType::BF16 : DType::F32, tier_of(p["tier"]), role_of(p["role"]),
                                p["index"]));
    ts.bind(opt);
    for (size_t t = 0; t < ts.infos.size(); ++t) {
        const auto& w0 = g["weights0"][ts.infos[t].name];
        for (int64_t i = 0; i < ts.infos[t].numel(); ++i) ts.set_weight(t, i, w0[size_t(i)].get<float>());
    }
    const int steps = g["steps"];
    for (int s = 0; s < steps; ++s) {
        for (size_t t = 0; t < ts.infos.size(); ++t) {
            const auto& gr = g["grads"][size_t(s)][ts.infos[t].name];
            for (int64_t i = 0; i < ts.infos[t].numel(); ++i) ts.grads[t][size_t(i)] = gr[size_t(i)].get<float>();
        }
        optimizer_step(opt, ts.slots, OptimStep{s + 1, g["lrs"][size_t(s)].get<double>(), 42});
    }
    for (size_t t = 0; t < ts.infos.size(); ++t) {
        const ParamInfo& p = ts.infos[t];
        INFO("optimizer " << name << " tensor " << p.name);
        const auto& want = og["weights"][p.name];
        // galore-paper's projected tensors are compared too: the fixture's eps (1e-4) keeps the
        // step-1 update of the off-diagonal entries of P^T G Q (zero up to rounding) ~1e-4 of the rest.
        {
            int64_t exact = 0;
            for (int64_t i = 0; i < p.numel(); ++i) {
                float a = ts.weight(t, i), b = want[size_t(i)].get<float>();
                INFO("weight " << i << " engine " << a << " torch " << b);
                if (p.dtype == DType::BF16) {
                    CHECK(std::fabs(a - b) <= bf16_ulp(std::fmax(std::fabs(a), std::fabs(b))) * 1.01f);
                    exact += a == b;
                } else {
                    CHECK(std::fabs(a - b) <= 2e-5f + 1e-5f * std::fabs(b));
                }
            }
            if (p.dtype == DType::BF16) CHECK(double(exact) >= 0.9 * double(p.numel()));
        }
        for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
            const char* key = kind_key(spec.kind);
            INFO("state " << key);
            REQUIRE(og["state"][p.name].contains(key));
            const auto& ws = og["state"][p.name][key];
            REQUIRE(int64_t(ws.size()) == spec.numel());
            const float* have = ts.slots[t].st(spec.kind);
            double mx = 0;
            for (const auto& v : ws) mx = std::fmax(mx, std::fabs(v.get<double>()));
            for (int64_t i = 0; i < spec.numel(); ++i) {
                double b = ws[size_t(i)].get<double>(), a = have[i];
                INFO("element " << i << " engine " << a << " torch " << b);
                CHECK(std::fabs(a - b) <= 1e-4 * std::fabs(b) + 1e-5 * mx);
            }
        }
        // And nothing the reference keeps is missing from the engine.
        CHECK(og["state"][p.name].size() == optimizer_param_state(opt, p).size());
    }
}

}  // namespace

TEST_CASE("golden: SkewAdam (Algorithm 1) matches the torch reference") { run_golden("skewadam"); }
TEST_CASE("golden: SkewAdam expert-momentum policy matches the torch reference") {
    run_golden("skewadam-expert-momentum");
}
TEST_CASE("golden: SkewAdam factored-router policy matches the torch reference") {
    run_golden("skewadam-factored-router");
}
TEST_CASE("golden: SkewAdam uniform policy matches the torch reference") { run_golden("uniform"); }
TEST_CASE("golden: AdamW matches the torch reference") { run_golden("adamw"); }
TEST_CASE("golden: Lion matches the torch reference") { run_golden("lion"); }
TEST_CASE("golden: Muon (paper form) matches the torch reference") { run_golden("muon"); }
TEST_CASE("golden: Muon (Keller Jordan form) matches the torch reference") { run_golden("muon-kj"); }
TEST_CASE("golden: Adafactor matches the torch reference") { run_golden("adafactor"); }
TEST_CASE("golden: GaLore (reference form) matches the torch reference") { run_golden("galore"); }
TEST_CASE("golden: GaLore (paper form) weights and state match the torch reference") { run_golden("galore-paper"); }

// ---- AdamW against torch.optim.AdamW itself (tests/reference/optim/make_adamw_torch.py)

namespace {

const json& adamw_torch() {
    static json j = [] {
        std::ifstream f(std::string(SKEW_SOURCE_DIR) + "/tests/reference/optim/adamw_torch_golden.json");
        REQUIRE(f.good());
        return json::parse(f);
    }();
    return j;
}

OptimizerConfig adamw_from(const json& c, Rounding rounding) {
    OptimizerConfig o = builtin_optimizer("adamw");
    o.lr = c["lr"];
    o.beta1 = c["beta1"];
    o.beta2 = c["beta2"];
    o.eps = c["eps"];
    o.weight_decay = c["weight_decay"];
    o.rounding = rounding;
    return o;
}

}  // namespace

// Step the "nearest" parameters (start: params, weights0, grads) with `opt` at traj's lr_t and
// compare every step's weights with traj["weights"] and the final state with traj["state"]
// (first-moment kinds as "exp_avg", second-moment kinds as "exp_avg_sq", torch's names).
void check_nearest_trajectory(const json& start, const json& traj, const OptimizerConfig& opt, int steps) {
    test::TensorSet ts;
    for (const json& p : start["params"])
        ts.add(test::make_param(p["name"], p["shape"].get<std::vector<int64_t>>(),
                                p["dtype"] == "bf16" ? DType::BF16 : DType::F32, tier_of(p["tier"]), role_of(p["role"]),
                                p["index"]));
    ts.bind(opt);
    for (size_t t = 0; t < ts.infos.size(); ++t)
        for (int64_t i = 0; i < ts.infos[t].numel(); ++i)
            ts.set_weight(t, i, start["weights0"][ts.infos[t].name][size_t(i)].get<float>());
    int64_t bf16_total = 0, bf16_exact = 0;
    for (int s = 0; s < steps; ++s) {
        for (size_t t = 0; t < ts.infos.size(); ++t)
            for (int64_t i = 0; i < ts.infos[t].numel(); ++i)
                ts.grads[t][size_t(i)] = start["grads"][size_t(s)][ts.infos[t].name][size_t(i)].get<float>();
        optimizer_step(opt, ts.slots, OptimStep{s + 1, traj["lrs"][size_t(s)].get<double>(), 42});
        for (size_t t = 0; t < ts.infos.size(); ++t) {
            const ParamInfo& p = ts.infos[t];
            const auto& want = traj["weights"][size_t(s)][p.name];
            for (int64_t i = 0; i < p.numel(); ++i) {
                const float a = ts.weight(t, i), b = want[size_t(i)].get<float>();
                INFO("step " << s + 1 << " tensor " << p.name << " element " << i << " engine " << a << " reference "
                             << b);
                if (p.dtype == DType::BF16) {
                    // the same fp32 value up to op order, rounded to nearest: equal, or 1 ulp at a tie
                    CHECK(std::fabs(a - b) <= bf16_ulp(std::fmax(std::fabs(a), std::fabs(b))) * 1.01f);
                    bf16_exact += a == b;
                    ++bf16_total;
                } else {
                    // fp32 throughout: a few fp32 roundings of an update of size ~lr per step
                    CHECK(std::fabs(a - b) <= 1e-6f * std::fabs(b) + 1e-8f);
                }
            }
        }
    }
    INFO(bf16_exact << " of " << bf16_total << " bf16 weights bit-identical to the reference's");
    CHECK(double(bf16_exact) >= 0.97 * double(bf16_total));
    for (size_t t = 0; t < ts.infos.size(); ++t) {
        const ParamInfo& p = ts.infos[t];
        for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
            const bool first = spec.kind == StateKind::MOMENTUM || spec.kind == StateKind::ADAM_M;
            const char* key = first ? "exp_avg" : "exp_avg_sq";
            INFO("tensor " << p.name << " state " << kind_key(spec.kind) << " vs the reference's " << key);
            REQUIRE(traj["state"][p.name].contains(key));
            const auto& ws = traj["state"][p.name][key];
            REQUIRE(int64_t(ws.size()) == spec.numel());
            const float* have = ts.slots[t].st(spec.kind);
            for (int64_t i = 0; i < spec.numel(); ++i) {
                const double b = ws[size_t(i)].get<double>(), a = have[i];
                INFO("element " << i << " engine " << a << " reference " << b);
                CHECK(std::fabs(a - b) <= 1e-6 * std::fabs(b) + 1e-12);
            }
        }
        CHECK(traj["state"][p.name].size() == optimizer_param_state(opt, p).size());
    }
}

TEST_CASE("golden: AdamW follows torch.optim.AdamW step by step (round to nearest), state included") {
    const json& g = adamw_torch();
    check_nearest_trajectory(g["nearest"], g["nearest"], adamw_from(g["config"], Rounding::NEAREST), g["steps"]);
}

TEST_CASE("golden: Lion follows its paper's Algorithm 2 step by step (round to nearest), state included") {
    const json& g = adamw_torch();
    const json& c = g["lion"]["config"];
    OptimizerConfig opt = builtin_optimizer("lion");
    opt.lr = c["lr"];
    opt.beta1 = c["beta1"];
    opt.beta2 = c["beta2"];
    opt.weight_decay = c["weight_decay"];
    opt.rounding = Rounding::NEAREST;
    check_nearest_trajectory(g["nearest"], g["lion"], opt, g["steps"]);
}

TEST_CASE("golden: AdamW with stochastic rounding follows torch's fp32 trajectory in expectation") {
    const json& g = adamw_torch();
    const json& sr = g["stochastic"];
    const OptimizerConfig opt = adamw_from(g["config"], Rounding::STOCHASTIC);
    const auto shape = sr["shape"].get<std::vector<int64_t>>();
    test::TensorSet ts;
    ts.add(test::make_param("mat", shape, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    ts.bind(opt);
    const int64_t n = ts.infos[0].numel();
    std::vector<float> w0(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        w0[size_t(i)] = sr["weights0"][size_t(i)].get<float>();
        ts.set_weight(0, i, w0[size_t(i)]);
    }
    const double ulp = 1.0 / 128.0;  // every weight stays in +-[1, 2)
    const int steps = g["steps"];
    for (int s = 0; s < steps; ++s) {
        for (int64_t i = 0; i < n; ++i) ts.grads[0][size_t(i)] = sr["grads"][size_t(s)][size_t(i)].get<float>();
        optimizer_step(opt, ts.slots, OptimStep{s + 1, sr["lrs"][size_t(s)].get<double>(), 42});
        // The error against the fp32 trajectory, signed along the direction the weight moved: 0 in
        // expectation for unbiased rounding (std <= sqrt(steps/4)/sqrt(n) = 0.04 ulp here); round to
        // nearest freezes these sub-half-ulp updates (about -0.5 ulp by step 6), truncation too.
        double along = 0.0, worst = 0.0;
        int64_t moved = 0;
        for (int64_t i = 0; i < n; ++i) {
            const double ref = sr["weights"][size_t(s)][size_t(i)].get<double>(), a = ts.weight(0, i);
            const double dir = ref > w0[size_t(i)] ? 1.0 : -1.0;
            along += (a - ref) * dir / ulp;
            const double e = std::fabs(a - ref) / ulp;
            worst = (std::isnan(e) || e > worst) ? e : worst;  // NaN propagates
            moved += a != w0[size_t(i)];
        }
        along /= double(n);
        INFO("step " << s + 1 << ": mean error along the update " << along << " ulp, worst " << worst << " ulp, moved "
                     << moved << " of " << n);
        CHECK(std::fabs(along) <= 0.2);
        CHECK(worst < double(s + 1) + 0.01);  // each rounding moves a weight by less than one ulp
        if (s == steps - 1) CHECK(moved > n / 4);
    }
}
