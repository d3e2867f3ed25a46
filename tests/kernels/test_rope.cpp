// Tests of the rotary position embedding (kernels/cpu/rope.cpp, kernels/common/rope_math.h): the
// rotation against a double evaluation of the rotate-half definition, the inverse as the exact
// backward (finite differences of a loss through the forward), norms preserved, positions offset
// by pos0 as a KV cache uses them, and an odd head_dim refused.
#include <cmath>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// The definition in double: lane i pairs with i + d/2 at angle pos * theta^(-2i/d).
std::vector<double> rope_reference(const std::vector<float>& x, int64_t B, int64_t T, int64_t H, int64_t d,
                                   int64_t pos0, double theta) {
    std::vector<double> out(x.begin(), x.end());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t base = ((b * T + t) * H + h) * d;
                for (int64_t i = 0; i < d / 2; ++i) {
                    const double a = double(pos0 + t) * std::pow(theta, -2.0 * double(i) / double(d));
                    const double lo = x[size_t(base + i)], hi = x[size_t(base + i + d / 2)];
                    out[size_t(base + i)] = lo * std::cos(a) - hi * std::sin(a);
                    out[size_t(base + i + d / 2)] = hi * std::cos(a) + lo * std::sin(a);
                }
            }
    return out;
}

}  // namespace

TEST_CASE("rope rotates lane i with lane i + d/2 by pos * theta^(-2i/d), as evaluated in double") {
    for (int64_t d : {16, 32, 64, 128}) {
        INFO("head_dim " << d);
        const int64_t B = 2, T = 70, H = 3, pos0 = 5;
        const double theta = d == 128 ? 1e6 : 1e4;
        auto x = random_vector(B * T * H * d, uint32_t(d), -2.0f, 2.0f);
        const std::vector<double> ref = rope_reference(x, B, T, H, d, pos0, theta);
        cpu::rope(x.data(), B, T, H, d, pos0, float(theta), false);
        // fp32 angles: pos * inv_freq carries a relative error ~2^-24 of an angle up to ~75 rad, so the
        // rotation is off by up to ~1e-5 absolute on |x| <= 2.8
        double worst = 0.0;
        for (size_t i = 0; i < x.size(); ++i) worst = max_nan(worst, std::fabs(double(x[i]) - ref[i]));
        CHECK(worst <= 3e-5);
    }
}

TEST_CASE("rope's inverse undoes it, keeps every pair's norm, and is the backward by finite differences") {
    const int64_t B = 1, T = 9, H = 2, d = 16;
    auto x = random_vector(B * T * H * d, 3);
    const auto x0 = x;
    cpu::rope(x.data(), B, T, H, d, 0, 1e4f, false);
    for (int64_t r = 0; r < B * T * H; ++r)
        for (int64_t i = 0; i < d / 2; ++i) {
            const size_t lo = size_t(r * d + i), hi = lo + size_t(d / 2);
            CHECK(std::hypot(x[lo], x[hi]) == Approx(std::hypot(x0[lo], x0[hi])).epsilon(1e-6));
        }
    cpu::rope(x.data(), B, T, H, d, 0, 1e4f, true);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(x[i] == Approx(x0[i]).margin(1e-6));

    const auto w = random_vector(B * T * H * d, 4);
    auto loss = [&] {
        std::vector<float> y = x;
        cpu::rope(y.data(), B, T, H, d, 0, 1e4f, false);
        return dot(y, w);
    };
    std::vector<float> g = w;  // dL/dy = w; dL/dx = R^T w
    cpu::rope(g.data(), B, T, H, d, 0, 1e4f, true);
    check_gradient("dx", g, fd_gradient(x, loss, 1e-3f), 1e-4, 1e-3);
}

TEST_CASE("rope at pos0 equals the rows of a longer sequence at those positions, and an odd head_dim is refused") {
    const int64_t H = 2, d = 32, T = 12, p = 7;
    auto full = random_vector(T * H * d, 8);
    std::vector<float> tail(full.begin() + p * H * d, full.end());
    cpu::rope(full.data(), 1, T, H, d, 0, 1e4f, false);
    cpu::rope(tail.data(), 1, T - p, H, d, p, 1e4f, false);
    for (size_t i = 0; i < tail.size(); ++i) REQUIRE(tail[i] == full[size_t(p * H * d) + i]);
    auto be = make_cpu_backend();
    std::vector<bf16> odd(size_t(3 * 5));
    CHECK_THROWS_WITH(be->rope(odd.data(), 1, 1, 3, 5, 0, 1e4f), Catch::Contains("head_dim 5"));
}
