// Adafactor, Muon (both forms) and GaLore (reference form) against trajectories derived from their
// papers and reference code without reading skew's C++ (tests/reference/optim/make_independent.py,
// float64): every step's weights, and the final optimizer state where the reference keeps the same
// quantity. fp32 weights, so what is compared is the update itself, not a rounding.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <optional>
#include <string>

#include "optim/optimizer.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using nlohmann::json;

namespace {

const json& independent() {
    static json j = [] {
        std::ifstream f(std::string(SKEW_SOURCE_DIR) + "/tests/reference/optim/independent_golden.json");
        REQUIRE(f.good());
        return json::parse(f);
    }();
    return j;
}

Role role_named(const std::string& s) {
    const std::optional<Role> role = parse_choice<Role>(s);
    INFO("role " << s);
    REQUIRE(role.has_value());
    return *role;
}

const char* kind_name(StateKind k) {
    switch (k) {
        case StateKind::MOMENTUM: return "MOMENTUM";
        case StateKind::SECOND_FULL: return "SECOND_FULL";
        case StateKind::SECOND_ROW: return "SECOND_ROW";
        case StateKind::SECOND_COL: return "SECOND_COL";
        default: return "";
    }
}

OptimizerConfig config_of(const json& c) {
    OptimizerConfig o = builtin_optimizer(c["type"].get<std::string>());
    o.lr = c["lr"];
    o.beta1 = c["beta1"];
    o.beta2 = c["beta2"];
    o.eps = c["eps"];
    o.weight_decay = c["weight_decay"];
    o.rounding = Rounding::NEAREST;
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

// Weights within 1e-6 (an update is ~lr = 1e-2 per step: 1e-4 of it) plus 1e-6 relative; the
// worst error is reported so the margin shows.
void run_independent(const std::string& name) {
    const json& g = independent();
    const json& og = g["optimizers"][name];
    const OptimizerConfig opt = config_of(og["config"]);
    test::TensorSet ts;
    for (const json& p : og["params"])
        ts.add(test::make_param(p["name"], p["shape"].get<std::vector<int64_t>>(), DType::F32,
                                p["tier"] == "experts" ? Tier::EXPERTS : Tier::BACKBONE, role_named(p["role"]),
                                p["index"]));
    ts.bind(opt);
    for (size_t t = 0; t < ts.infos.size(); ++t)
        for (int64_t i = 0; i < ts.infos[t].numel(); ++i)
            ts.set_weight(t, i, og["weights0"][ts.infos[t].name][size_t(i)].get<float>());
    double worst = 0.0;
    const int steps = g["steps"];
    for (int s = 0; s < steps; ++s) {
        for (size_t t = 0; t < ts.infos.size(); ++t)
            for (int64_t i = 0; i < ts.infos[t].numel(); ++i)
                ts.grads[t][size_t(i)] = og["grads"][size_t(s)][ts.infos[t].name][size_t(i)].get<float>();
        optimizer_step(opt, ts.slots, OptimStep{s + 1, g["lrs"][size_t(s)].get<double>(), 42});
        for (size_t t = 0; t < ts.infos.size(); ++t) {
            const ParamInfo& p = ts.infos[t];
            const auto& want = og["weights"][size_t(s)][p.name];
            int64_t bad = 0, first_bad = -1;
            for (int64_t i = 0; i < p.numel(); ++i) {
                const double a = ts.weight(t, i), b = want[size_t(i)].get<double>();
                const double e = std::fabs(a - b);
                worst = (std::isnan(e) || e > worst) ? e : worst;
                if (!(e <= 1e-6 + 1e-6 * std::fabs(b))) {
                    if (first_bad < 0) first_bad = i;
                    ++bad;
                }
            }
            INFO(name << " step " << s + 1 << " tensor " << p.name << ": " << bad << " of " << p.numel()
                      << " weights off the reference (first: element " << first_bad << ")");
            CHECK(bad == 0);
        }
    }
    WARN(name << ": worst weight error over " << steps << " steps " << worst);
    // state the reference keeps under the same name (momentum, Adafactor's row/column/full averages)
    for (size_t t = 0; t < ts.infos.size(); ++t) {
        const ParamInfo& p = ts.infos[t];
        if (!og["state"].contains(p.name)) continue;
        const json& want_state = og["state"][p.name];
        int64_t compared = 0;
        for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
            const std::string key = kind_name(spec.kind);
            if (key.empty() || !want_state.contains(key)) continue;
            const auto& ws = want_state[key];
            REQUIRE(int64_t(ws.size()) == spec.numel());
            const float* have = ts.slots[t].st(spec.kind);
            double mx = 0.0;
            for (const auto& v : ws) mx = std::fmax(mx, std::fabs(v.get<double>()));
            int64_t bad = 0;
            for (int64_t i = 0; i < spec.numel(); ++i) {
                const double b = ws[size_t(i)].get<double>(), a = have[i];
                bad += !(std::fabs(a - b) <= 1e-5 * std::fabs(b) + 1e-6 * mx);
            }
            INFO(name << " tensor " << p.name << " state " << key << ": " << bad << " of " << spec.numel() << " off");
            CHECK(bad == 0);
            ++compared;
        }
        INFO(name << " tensor " << p.name);
        CHECK(compared == int64_t(want_state.size()));  // every reference state was found in the engine
    }
}

}  // namespace

TEST_CASE("independent reference: Adafactor (Shazeer and Stern 2018, HuggingFace conventions)") {
    run_independent("adafactor");
}
TEST_CASE("independent reference: Muon (Keller Jordan's muon.py)") { run_independent("muon-kj"); }
TEST_CASE("independent reference: Muon (the paper's form)") { run_independent("muon"); }
TEST_CASE("independent reference: GaLore (Zhao et al. 2024 Algorithm 2, GaLoreProjector)") {
    run_independent("galore");
}
