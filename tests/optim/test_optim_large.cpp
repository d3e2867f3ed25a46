// 64-bit indexing on a real tensor of more than 2^31 elements (docs/design.md "64-bit indexing"): one
// SkewAdam expert-tier step (factored R, C, per-matrix RMS clip) on a (2, 32768, 32769) bf16 stack,
// checked on a strided subset of elements, including those beyond 2^31, against an independent
// computation. Needs ~8.6 GB of RAM and a minute: hidden, run with `test_optim "[large]"`.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "engine/config.h"
#include "kernels/common/bf16.h"
#include "optim/optimizer.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;

namespace {

float grad_value(int64_t i) {
    uint64_t h = uint64_t(i) * 0x9E3779B97F4A7C15ull;
    return bf16_to_f32(f32_to_bf16((float(int((h >> 56) & 0xFF)) - 127.5f) / 128.0f * 0.01f));
}

float weight_value(int64_t i) { return bf16_to_f32(f32_to_bf16(0.5f + float(int64_t(i) % 97) * 1e-3f)); }

}  // namespace

TEST_CASE("a tensor of more than 2^31 elements is updated correctly (SkewAdam, factored)", "[.][large]") {
    const int64_t E = 2, R = 32768, C = 32769, n = E * R * C;
    REQUIRE(n > (int64_t(1) << 31));
    ParamInfo p =
        test::make_param("blocks.1.moe.experts.w1", {E, R, C}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 7);
    OptimizerConfig opt = builtin_optimizer("skewadam");
    opt.rounding = Rounding::NEAREST;
    std::vector<uint16_t> w(static_cast<size_t>(n)), g(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
        w[size_t(i)] = f32_to_bf16(weight_value(i)).bits;
        g[size_t(i)] = f32_to_bf16(grad_value(i)).bits;
    }
    ParamSlot s;
    s.info = &p;
    s.weight = w.data();
    s.grad = g.data();
    s.grad_dtype = DType::BF16;
    std::vector<ParamSlot> slots{s};
    HostOptimState state;
    allocate_host_state(opt, slots, state);
    const double lr = 1e-2, b2 = opt.beta2, eps = opt.eps;
    optimizer_step(opt, slots, OptimStep{1, lr, 42});
    const float* Rs = slots[0].st(StateKind::SECOND_ROW);
    const float* Cs = slots[0].st(StateKind::SECOND_COL);

    // Independent: per-matrix Rbar and clip from the state, sampled R and C from the gradient.
    std::vector<double> rbar(E), clip(E);
    for (int64_t e = 0; e < E; ++e) {
        double sr = 0;
        for (int64_t r = 0; r < R; ++r) sr += Rs[e * R + r];
        rbar[size_t(e)] = std::fmax(sr / double(R), 1e-15);
        double ss = 0;
#pragma omp parallel for schedule(static) reduction(+ : ss)
        for (int64_t r = 0; r < R; ++r) {
            const double row = std::sqrt(std::fmax(Rs[e * R + r] / rbar[size_t(e)], eps));
            for (int64_t c = 0; c < C; ++c) {
                const double col = std::sqrt(std::fmax(double(Cs[e * C + c]), eps));
                const double u = std::sqrt(1 - b2) * grad_value((e * R + r) * C + c) / row / col;
                ss += u * u;
            }
        }
        clip[size_t(e)] = std::fmax(1.0, std::sqrt(ss / double(R * C)));
    }
    int64_t checked = 0, beyond = 0, moved = 0;
    std::vector<int64_t> samples;
    for (int64_t i = 5; i < n; i += (int64_t(1) << 24) + 3) samples.push_back(i);
    for (int64_t i : {(int64_t(1) << 31) - 1, int64_t(1) << 31, (int64_t(1) << 31) + 1, n - 1}) samples.push_back(i);
    for (int64_t i : samples) {
        const int64_t e = i / (R * C), k = i - e * R * C, r = k / C, c = k - r * C;
        double rm = 0, cm = 0;
        for (int64_t j = 0; j < C; ++j) rm += std::pow(double(grad_value((e * R + r) * C + j)), 2);
        for (int64_t j = 0; j < R; ++j) cm += std::pow(double(grad_value((e * R + j) * C + c)), 2);
        const double Rr = (1 - b2) * rm / double(C), Cc = (1 - b2) * cm / double(R);
        INFO("element " << i << " matrix " << e << " row " << r << " col " << c);
        CHECK(std::fabs(Rs[e * R + r] - Rr) <= 1e-5 * Rr + 1e-30);
        CHECK(std::fabs(Cs[e * C + c] - Cc) <= 1e-5 * Cc + 1e-30);
        const double row = std::sqrt(std::fmax(Rr / rbar[size_t(e)], eps)), col = std::sqrt(std::fmax(Cc, eps));
        const double u = std::sqrt(1 - b2) * grad_value(i) / row / col / clip[size_t(e)];
        const double x = double(weight_value(i)) * (1 - lr * 0.05) - lr * u;
        const float want = bf16_to_f32(f32_to_bf16(float(x)));
        const float have = bf16_to_f32(bf16{w[size_t(i)]});
        int ex;
        std::frexp(std::fabs(want), &ex);
        CHECK(std::fabs(have - want) <= std::ldexp(1.0f, ex - 8) * 1.01f);
        ++checked;
        beyond += i >= (int64_t(1) << 31);
        moved += have != weight_value(i);
    }
    CHECK(beyond >= 4);
    CHECK(moved > checked / 2);
}
