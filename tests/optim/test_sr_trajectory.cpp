// Stochastic rounding of bf16 weights along whole trajectories, for every optimizer family
// (docs/optimizers.md §9.1): the bf16 weights written back with stochastic rounding follow the
// optimizer's own fp32-weight trajectory in expectation, where round to nearest freezes updates of
// less than half an ulp. The fp32 trajectory is the same optimizer, same gradients, fp32 weights;
// the optimizers' equations are checked against their references in test_golden.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;

namespace {

constexpr int64_t kRows = 64, kCols = 96;  // one matrix (Muon and GaLore need 2-D), 6,144 weights
constexpr int kSteps = 8;
constexpr double kUlp = 1.0 / 128.0;  // bf16 ulp in [1, 2): every weight stays in +-[1, 2)

// Deterministic standard normals (splitmix64 + Box-Muller), the same on every platform.
struct Normals {
    uint64_t s;
    double uniform() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return (double((z ^ (z >> 31)) >> 11) + 0.5) / 9007199254740992.0;
    }
    double next() { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); }
};

struct Problem {
    std::vector<float> w0;                  // bf16-representable, |w| in [1.1, 1.9]
    std::vector<std::vector<float>> grads;  // per step
};

Problem make_problem() {
    Problem p;
    Normals r{20260518};
    const int64_t n = kRows * kCols;
    for (int64_t i = 0; i < n; ++i) {
        const double mag = 1.1 + 0.8 * r.uniform();
        p.w0.push_back(bf16_to_f32(f32_to_bf16(float(r.uniform() < 0.5 ? -mag : mag))));
    }
    // a per-element drift (the same sign every step) plus noise, so weights move steadily
    std::vector<double> drift(static_cast<size_t>(n));
    for (auto& d : drift) d = r.next();
    for (int s = 0; s < kSteps; ++s) {
        std::vector<float> g(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) g[size_t(i)] = float(1e-2 * (drift[size_t(i)] + 0.5 * r.next()));
        p.grads.push_back(std::move(g));
    }
    return p;
}

// The weights after every step of `opt` on one (kRows, kCols) matrix stored as `dtype`.
std::vector<std::vector<float>> trajectory(const OptimizerConfig& opt, DType dtype, const Problem& pr) {
    test::TensorSet ts;
    ts.add(test::make_param("mat", {kRows, kCols}, dtype, Tier::BACKBONE, Role::ATTN_Q, 3));
    ts.bind(opt);
    const int64_t n = ts.infos[0].numel();
    for (int64_t i = 0; i < n; ++i) ts.set_weight(0, i, pr.w0[size_t(i)]);
    std::vector<std::vector<float>> out;
    for (int s = 0; s < kSteps; ++s) {
        ts.grads[0] = pr.grads[size_t(s)];
        optimizer_step(opt, ts.slots, OptimStep{s + 1, opt.lr, 42});
        std::vector<float> w(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) w[size_t(i)] = ts.weight(0, i);
        out.push_back(std::move(w));
    }
    return out;
}

struct Along {
    double mean_ulp = 0.0;   // mean signed error along the direction the fp32 weight moved
    double worst_ulp = 0.0;  // max |error| (NaN propagates)
    double step_ulp = 0.0;   // mean |fp32 update| per step
};

Along compare(const std::vector<float>& w0, const std::vector<float>& w, const std::vector<float>& ref, int steps) {
    Along a;
    for (size_t i = 0; i < w0.size(); ++i) {
        const double dir = ref[i] > w0[i] ? 1.0 : -1.0;
        const double e = (double(w[i]) - double(ref[i])) / kUlp;
        a.mean_ulp += e * dir;
        const double ae = std::fabs(e);
        a.worst_ulp = (std::isnan(ae) || ae > a.worst_ulp) ? ae : a.worst_ulp;
        a.step_ulp += std::fabs(double(ref[i]) - double(w0[i])) / kUlp / steps;
    }
    a.mean_ulp /= double(w0.size());
    a.step_ulp /= double(w0.size());
    return a;
}

// Stochastic: |mean error along the update| <= 0.1 ulp at every step (its standard deviation is
// about sqrt(steps/4)/sqrt(6144) <= 0.02 ulp), each weight within one ulp per step. Nearest, the
// control: updates of a fraction of an ulp are lost, so by the last step it lags the fp32 weights
// by more than 0.3 ulp along the update (the stochastic check would catch a rounding that biased
// like it).
// The lr is set so the first fp32 step moves weights by 0.25 ulp on average (each optimizer's
// update scales with lr: measured at lr 1e-3 on fp32 weights first).
void check_sr(const std::string& name) {
    OptimizerConfig opt = builtin_optimizer(name);
    const Problem pr = make_problem();
    opt.rounding = Rounding::NEAREST;  // fp32 weights are written as they are
    opt.lr = 1e-3;
    const std::vector<float> probe = trajectory(opt, DType::F32, pr)[0];
    const double probe_ulp = compare(pr.w0, probe, probe, 1).step_ulp;
    REQUIRE(probe_ulp > 0.0);
    opt.lr = 1e-3 * 0.25 / probe_ulp;
    INFO(name << ": lr " << opt.lr);
    const auto ref = trajectory(opt, DType::F32, pr);
    opt.rounding = Rounding::STOCHASTIC;
    const auto sr = trajectory(opt, DType::BF16, pr);
    opt.rounding = Rounding::NEAREST;
    const auto rn = trajectory(opt, DType::BF16, pr);
    for (int s = 0; s < kSteps; ++s) {
        const Along a = compare(pr.w0, sr[size_t(s)], ref[size_t(s)], s + 1);
        INFO(name << " step " << s + 1 << ": stochastic rounding's mean error along the update " << a.mean_ulp
                  << " ulp, worst " << a.worst_ulp << " ulp; fp32 update " << a.step_ulp << " ulp per step");
        CHECK(std::fabs(a.mean_ulp) <= 0.1);
        CHECK(a.worst_ulp < double(s + 1) + 0.01);
        if (s == 0) {
            // sub-half-ulp updates on average, else nearest would not be a control
            CHECK(a.step_ulp >= 0.1);
            CHECK(a.step_ulp <= 0.45);
        }
    }
    const Along n = compare(pr.w0, rn.back(), ref.back(), kSteps);
    const Along s = compare(pr.w0, sr.back(), ref.back(), kSteps);
    WARN(name << " (lr " << opt.lr << ") after " << kSteps << " steps of " << s.step_ulp << " ulp: stochastic "
              << s.mean_ulp << " ulp along the update, nearest " << n.mean_ulp << " ulp");
    CHECK(n.mean_ulp < -0.3);
}

}  // namespace

TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: Lion") { check_sr("lion"); }
TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: SkewAdam") { check_sr("skewadam"); }
TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: Adafactor") { check_sr("adafactor"); }
TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: Muon (paper form)") { check_sr("muon"); }
TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: Muon (Keller Jordan form)") {
    check_sr("muon-kj");
}
TEST_CASE("stochastic rounding follows the fp32 trajectory in expectation: GaLore") { check_sr("galore"); }
