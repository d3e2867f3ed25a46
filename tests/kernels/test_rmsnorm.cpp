// Tests of RMSNorm with an fp32 weight (kernels/cpu/rmsnorm.cpp): the output against a double
// evaluation of the definition, gradients to the input and the weight against finite differences,
// the accumulate flag, and the bf16 path against the fp32 path.
#include <cmath>

#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("rmsnorm equals x / sqrt(mean(x^2) + eps) * weight evaluated in double") {
    const int64_t N = 5, C = 37;  // C not a multiple of the 64-column reduction block
    const auto x = random_vector(N * C, 11, -3.0f, 5.0f);
    const auto w = random_vector(C, 12, 0.5f, 1.5f);
    const float eps = 1e-5f;
    std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N));
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    double worst = 0.0;
    for (int64_t r = 0; r < N; ++r) {
        double ss = 0.0;
        for (int64_t c = 0; c < C; ++c) ss += double(x[size_t(r * C + c)]) * x[size_t(r * C + c)];
        const double rs = 1.0 / std::sqrt(ss / double(C) + double(eps));
        CHECK(rstd[size_t(r)] == Approx(rs).epsilon(1e-6));
        for (int64_t c = 0; c < C; ++c) {
            const double ref = double(x[size_t(r * C + c)]) * rs * double(w[size_t(c)]);
            worst = max_nan(worst, std::fabs(out[size_t(r * C + c)] - ref) / std::max(1e-3, std::fabs(ref)));
        }
    }
    CHECK(worst <= 1e-6);  // fp32 products of three factors: a few ulps
}

TEST_CASE("rmsnorm gradients match finite differences") {
    const int64_t N = 3, C = 8;
    auto x = random_vector(N * C, 2), w = random_vector(C, 3, 0.5f, 1.5f);
    const auto r = random_vector(N * C, 5);
    auto loss = [&] {
        std::vector<float> out(size_t(N * C));
        cpu::rmsnorm_forward(out.data(), nullptr, x.data(), w.data(), N, C, 1e-5f);
        return dot(out, r);
    };
    std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N));
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    std::vector<float> dx(size_t(N * C)), dw(size_t(C), 0.0f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C, false);
    // fp32 forward, eps 1e-3: truncation ~1e-6, rounding noise ~1e-4 absolute
    check_gradient("dinp", dx, fd_gradient(x, loss, 1e-3f), 5e-4, 1e-2);
    check_gradient("dweight", dw, fd_gradient(w, loss, 1e-3f), 5e-4, 1e-2);

    // accumulate_dinp adds to the existing gradient; the weight gradient always accumulates
    std::vector<float> dx2(size_t(N * C), 1.0f), dw2(dw);
    cpu::rmsnorm_backward(dx2.data(), dw2.data(), r.data(), x.data(), w.data(), rstd.data(), N, C, true);
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx2[i] == Approx(dx[i] + 1.0f).margin(1e-6));
    for (size_t i = 0; i < dw.size(); ++i) REQUIRE(dw2[i] == Approx(2.0f * dw[i]).margin(1e-6));
}

TEST_CASE("rmsnorm in bf16 matches the fp32 path") {
    auto be = make_cpu_backend();
    const int64_t N = 16, C = 64;
    const auto x = round_to_bf16(random_vector(N * C, 6, -2.0f, 2.0f));
    const auto g = round_to_bf16(random_vector(N * C, 7));
    const auto w = random_vector(C, 8, 0.5f, 1.5f);
    std::vector<float> out(size_t(N * C)), rstd(static_cast<size_t>(N)), dx(size_t(N * C)), dw(size_t(C), 0.0f), dw16(dw);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C, false);
    const auto x16 = to_bf16(x), g16 = to_bf16(g);
    std::vector<bf16> out16(size_t(N * C)), dx16(size_t(N * C));
    std::vector<float> rstd16(static_cast<size_t>(N));
    be->rmsnorm_forward(out16.data(), rstd16.data(), x16.data(), w.data(), N, C, 1e-6f);
    be->rmsnorm_backward(dx16.data(), dw16.data(), g16.data(), x16.data(), w.data(), rstd16.data(), N, C);
    // bf16 outputs: one rounding each, relative error <= 2^-8, so NMSE <= 2^-16 ~ 1.5e-5
    require_nmse("out", to_f32(out16), out, 2e-5);
    require_nmse("dinp", to_f32(dx16), dx, 2e-5);
    require_nmse("dweight", dw16, dw, 1e-10);
}
