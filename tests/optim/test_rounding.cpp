// The bf16 write-back (kernels/common/rounding.h): exact stochastic rounding is unbiased and
// idempotent (docs/optimizers.md §9.1); the paper's dithered rounding is biased toward zero at
// binade edges and that bias is asserted (§9.2); the noise streams are distinct per tensor and step;
// the one write-back target and rounding choice (kernels/common/optim_math.h) every optimizer uses.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>

#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"

using namespace skew;

namespace {

float ulp_bf16(float x) {  // bf16 spacing at |x| (normal range)
    int e;
    std::frexp(std::fabs(x), &e);  // |x| = f * 2^e, f in [0.5, 1)
    return std::ldexp(1.0f, e - 1 - 7);
}

struct Stats {
    double mean, se;
};

/// Mean and standard error of n draws of rounding x with Philox bits (tensor id, step 1).
template <typename F>
Stats draw_mean(float x, int64_t n, uint32_t tensor, F round) {
    double sum = 0, sumsq = 0;
    for (int64_t i = 0; i < n; ++i) {
        uint32_t r = rounding_bits(1234, 1, tensor, uint64_t(i));
        double y = double(bf16_to_f32(round(x, r)));
        sum += y;
        sumsq += y * y;
    }
    double mean = sum / double(n);
    double var = std::max(0.0, sumsq / double(n) - mean * mean);
    return {mean, std::sqrt(var / double(n))};
}

float from_bits(uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
}

}  // namespace

TEST_CASE("stochastic rounding is unbiased, including at binade edges") {
    const float u1 = ulp_bf16(1.0f);  // 2^-7
    const float xs[] = {
        1.0f + 0.01f * u1,  // just above a power of two
        1.0f + 0.3f * u1,
        2.0f - 0.01f * u1,  // just below the next
        2.0f - 0.3f * u1,  -(0.5f + 0.37f * ulp_bf16(0.5f)), 0.0123456f,
        3.0e-39f,  // subnormal
    };
    const int64_t n = 1 << 20;
    for (float x : xs) {
        Stats s = draw_mean(x, n, 7, [](float v, uint32_t r) { return bf16_round_stochastic(v, r); });
        INFO("x = " << x << " mean = " << s.mean << " se = " << s.se);
        // Within 5 standard errors (a false failure has probability ~6e-7 per value).
        CHECK(std::fabs(s.mean - double(x)) <= 5.0 * s.se + 1e-12 * std::fabs(double(x)));
        // The test has power: truncation (round toward zero) on the same draws is rejected.
        Stats t = draw_mean(x, n, 7, [](float v, uint32_t) { return bf16{uint16_t(f32_bits(v) >> 16)}; });
        CHECK(std::fabs(t.mean - double(x)) > 5.0 * s.se);
    }
}

TEST_CASE("stochastic rounding never moves a representable value") {
    for (uint32_t h = 0; h < 0x10000u; h += 7) {
        bf16 v{uint16_t(h)};
        if (bf16_isnan(v)) continue;
        float x = bf16_to_f32(v);
        for (uint32_t r : {0u, 1u, 0x7FFFu, 0x8000u, 0xFFFFu, 0x12345678u})
            REQUIRE(bf16_round_stochastic(x, r).bits == h);
    }
}

TEST_CASE("stochastic rounding keeps NaN NaN and does not overflow to inf") {
    for (uint32_t b : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0xFFC00000u, 0x7FFFFFFFu}) {
        for (uint32_t r : {0u, 0xFFFFu, 0x8000u}) CHECK(bf16_isnan(bf16_round_stochastic(from_bits(b), r)));
        CHECK(bf16_isnan(bf16_round_dithered(from_bits(b), 0x80000000u)));
    }
    CHECK(bf16_round_stochastic(INFINITY, 0xFFFFu).bits == 0x7F80u);
    CHECK(bf16_round_stochastic(-INFINITY, 0xFFFFu).bits == 0xFF80u);
    // FLT_MAX rounds to +inf under RNE; stochastic rounding clamps to the largest finite bf16.
    CHECK(f32_to_bf16(FLT_MAX).bits == 0x7F80u);
    for (uint32_t r : {0u, 1u, 0x8000u, 0xFFFFu}) {
        CHECK(bf16_round_stochastic(FLT_MAX, r).bits == 0x7F7Fu);
        CHECK(bf16_round_stochastic(-FLT_MAX, r).bits == 0xFF7Fu);
        CHECK(bf16_round_stochastic(from_bits(0x7F7F8000u), r).bits == 0x7F7Fu);
    }
    // Just below the top binade's last step: it can still round up, to a finite value.
    CHECK(bf16_round_stochastic(from_bits(0x7F7E8000u), 0xFFFFu).bits == 0x7F7Fu);
}

TEST_CASE("dithered rounding is biased toward zero at binade edges (research 9.2)") {
    const int64_t n = 1 << 21;
    auto dith = [](float v, uint32_t r) { return bf16_round_dithered(v, r); };
    auto sr = [](float v, uint32_t r) { return bf16_round_stochastic(v, r); };
    for (float scale : {1.0f, -0.03125f, 1024.0f}) {
        const float base = scale;  // a power of two (|scale|)
        const float u = ulp_bf16(base);
        // Just above 2^e: expected bias -u/8 + eps/2 = -0.120u at eps = 0.01u.
        float x = base + std::copysign(0.01f * u, base);
        Stats d = draw_mean(x, n, 3, dith);
        double bias = (d.mean - double(x)) / double(u) * (base < 0 ? -1.0 : 1.0);  // in ulps, + = away from zero
        INFO("above 2^e, x = " << x << " bias/u = " << bias);
        CHECK(std::fabs(bias - (-0.120)) < 0.01);
        Stats s = draw_mean(x, n, 3, sr);
        CHECK(std::fabs(s.mean - double(x)) <= 5.0 * s.se);
        // Just below 2^(e+1): spacing u there; expected bias -u/4 + eps/2 = -0.245u at eps = 0.01u.
        float y = 2.0f * base - std::copysign(0.01f * u, base);
        Stats d2 = draw_mean(y, n, 3, dith);
        double bias2 = (d2.mean - double(y)) / double(u) * (base < 0 ? -1.0 : 1.0);
        INFO("below 2^(e+1), y = " << y << " bias/u = " << bias2);
        CHECK(std::fabs(bias2 - (-0.245)) < 0.01);
        // About 2^-10 of |w| toward zero, as the issue states.
        CHECK(std::fabs(bias * double(u) / double(x) * 1024.0) > 0.9);
    }
    // Small updates are amplified: for representable w = 1.25 (m = 1.25) and delta = 0.1u,
    // E[new] - w = 2 delta / m = 0.16u (exact stochastic rounding: 0.1u).
    {
        const float u = ulp_bf16(1.25f), x = 1.25f + 0.1f * u;
        Stats d = draw_mean(x, n, 4, dith);
        INFO("gain: mean step / u = " << (d.mean - 1.25) / double(u));
        CHECK(std::fabs((d.mean - 1.25) / double(u) - 0.16) < 0.01);
        Stats s = draw_mean(x, n, 4, sr);
        CHECK(std::fabs((s.mean - 1.25) / double(u) - 0.1) < 0.01);
    }
    // A representable value with a zero update moves with probability (m-1)/m (1/3 at m = 1.5).
    int64_t moved = 0;
    for (int64_t i = 0; i < n; ++i)
        moved += bf16_round_dithered(1.5f, rounding_bits(9, 1, 0, uint64_t(i))).bits != f32_to_bf16(1.5f).bits;
    CHECK(std::fabs(double(moved) / double(n) - 1.0 / 3.0) < 0.003);
}

TEST_CASE("rounding noise differs across tensors, steps and elements and is reproducible") {
    const int n = 4096;
    auto same_words = [&](uint32_t s1, uint32_t t1, uint32_t s2, uint32_t t2) {
        int same = 0;
        for (int i = 0; i < n; ++i)
            same += rounding_bits(42, s1, t1, uint64_t(i)) == rounding_bits(42, s2, t2, uint64_t(i));
        return same;
    };
    CHECK(same_words(1, 0, 1, 1) == 0);
    CHECK(same_words(1, 0, 2, 0) == 0);
    CHECK(same_words(2, 5, 5, 2) == 0);
    CHECK(same_words(3, 3, 3, 3) == n);  // a pure function: a resumed run draws the same bits
    // Element 2^32 + i is not element i (64-bit counters).
    int same = 0;
    for (int i = 0; i < n; ++i)
        same += rounding_bits(42, 1, 0, uint64_t(i)) == rounding_bits(42, 1, 0, (uint64_t(1) << 32) + uint64_t(i));
    CHECK(same == 0);
    // Different run seeds differ.
    same = 0;
    for (int i = 0; i < n; ++i) same += rounding_bits(42, 1, 0, uint64_t(i)) == rounding_bits(43, 1, 0, uint64_t(i));
    CHECK(same == 0);
}

TEST_CASE("nearest rounding is the plain RNE cast") {
    CHECK(bf16_round_nearest(1.0f + 0.49f * ulp_bf16(1.0f)).bits == f32_to_bf16(1.0f).bits);
    CHECK(bf16_round_nearest(1.0f + 0.51f * ulp_bf16(1.0f)).bits == uint16_t(f32_to_bf16(1.0f).bits + 1));
    CHECK(bf16_write_back(1.0f + 0.51f * ulp_bf16(1.0f), ROUNDING_NEAREST, 1, 1, 1, 1).bits ==
          uint16_t(f32_to_bf16(1.0f).bits + 1));
}

TEST_CASE("the bf16 write-back target: decay fused in fp32, or with premultiply rounded to nearest first") {
    // fused: w*keep - lr*u, each product and the difference rounded once in fp32
    const float w = 1.0f, keep = 0.997f, lr = 0.01f, u = 0.5f;
    const float wk = w * keep, lu = lr * u;
    CHECK(optim_bf16_target(w, keep, lr, u, false) == wk - lu);
    CHECK(optim_bf16_target(w, keep, lr, 0.0f, false) == 0.997f);
    // premultiply (the paper's trainer `p.mul_(1 - lr*wd)`): 0.997 rounds to the bf16 0.99609375 first
    CHECK(optim_bf16_target(w, keep, lr, 0.0f, true) == 0.99609375f);
    CHECK(optim_bf16_target(w, keep, lr, u, true) == 0.99609375f - lu);
    // keep == 1: no decay, so no rounding of w (exact even when w is not a bf16 value)
    const float w_fine = 1.0f + 1.0f / 1024.0f;
    CHECK(optim_bf16_target(w_fine, 1.0f, lr, u, true) == w_fine - lu);
    CHECK(optim_bf16_target(w_fine, 1.0f, lr, u, false) == w_fine - lu);
}

TEST_CASE("bf16_round_bits picks the rounding by mode, optim_bf16_write rounds the target with it") {
    for (int i = 0; i < 4096; ++i) {
        const float x = from_bits(0x3F800000u + uint32_t(i) * 37u) * (i % 2 ? -1.0f : 1.0f);
        const uint32_t r = rounding_bits(7, 3, 5, uint64_t(i));
        CHECK(bf16_round_bits(x, ROUNDING_STOCHASTIC, r).bits == bf16_round_stochastic(x, r).bits);
        CHECK(bf16_round_bits(x, ROUNDING_DITHERED, r).bits == bf16_round_dithered(x, r).bits);
        CHECK(bf16_round_bits(x, ROUNDING_NEAREST, r).bits == bf16_round_nearest(x).bits);  // r ignored
        for (RoundingMode m : {ROUNDING_STOCHASTIC, ROUNDING_DITHERED, ROUNDING_NEAREST}) {
            CHECK(bf16_write_back(x, m, 7, 3, 5, uint64_t(i)).bits == bf16_round_bits(x, m, r).bits);
            for (bool pre : {false, true})
                CHECK(optim_bf16_write(x, 0.999f, 0.01f, 0.25f, pre, m, r).bits ==
                      bf16_round_bits(optim_bf16_target(x, 0.999f, 0.01f, 0.25f, pre), m, r).bits);
        }
    }
}
