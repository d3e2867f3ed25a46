// Tests of LayerNorm with bias and fp32 parameters (kernels/cpu/layernorm.cpp): normalization
// statistics, gradients to input, gain and bias against finite differences, the accumulate flag of
// the input gradient, and the bf16 path against the fp32 path by normalized MSE.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("layernorm output has zero mean and unit variance before gain and bias") {
    const int64_t N = 3, C = 16;
    const auto x = random_vector(N * C, 1, -3.0f, 5.0f);
    const std::vector<float> w(size_t(C), 1.0f), b(size_t(C), 0.0f);
    std::vector<float> out(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    for (int64_t r = 0; r < N; ++r) {
        double m = 0.0, v = 0.0;
        for (int64_t c = 0; c < C; ++c) m += out[size_t(r * C + c)];
        m /= double(C);
        for (int64_t c = 0; c < C; ++c) v += (out[size_t(r * C + c)] - m) * (out[size_t(r * C + c)] - m);
        REQUIRE(std::fabs(m) < 1e-6);
        REQUIRE(v / double(C) == Approx(1.0).epsilon(1e-4));  // eps = 1e-5 against variance ~2
    }
}

TEST_CASE("layernorm gradients match finite differences") {
    const int64_t N = 3, C = 8;
    auto x = random_vector(N * C, 2), w = random_vector(C, 3, 0.5f, 1.5f), b = random_vector(C, 4);
    const auto r = random_vector(N * C, 5);
    auto loss = [&] {
        std::vector<float> out(size_t(N * C));
        cpu::layernorm_forward(out.data(), nullptr, nullptr, x.data(), w.data(), b.data(), N, C, 1e-5f);
        return dot(out, r);
    };
    std::vector<float> out(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    std::vector<float> dx(size_t(N * C)), dw(size_t(C), 0.0f), db(size_t(C), 0.0f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                            C, false);
    // fp32 forward, eps 1e-3: truncation ~1e-6, rounding noise ~1e-4 absolute
    check_gradient("dinp", dx, fd_gradient(x, loss, 1e-3f), 5e-4, 1e-2);
    check_gradient("dweight", dw, fd_gradient(w, loss, 1e-3f), 5e-4, 1e-2);
    check_gradient("dbias", db, fd_gradient(b, loss, 1e-3f), 5e-4, 1e-2);

    // accumulate_dinp adds to the existing gradient (residual stream); parameters always accumulate
    std::vector<float> dx2(size_t(N * C), 1.0f);
    cpu::layernorm_backward(dx2.data(), dw.data(), nullptr, r.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                            C, true);
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx2[i] == Approx(dx[i] + 1.0f).margin(1e-6));
}

TEST_CASE("layernorm in bf16 matches the fp32 path") {
    auto be = make_cpu_backend();
    const int64_t N = 16, C = 64;
    const auto x = round_to_bf16(random_vector(N * C, 6, -2.0f, 2.0f));
    const auto g = round_to_bf16(random_vector(N * C, 7));
    const auto w = random_vector(C, 8, 0.5f, 1.5f), b = random_vector(C, 9);
    std::vector<float> out(size_t(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)),
        dx(size_t(N * C));
    std::vector<float> dw(size_t(C), 0.0f), db(size_t(C), 0.0f), dw16(dw), db16(db);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5f);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                            C, false);
    const auto x16 = to_bf16(x), g16 = to_bf16(g);
    std::vector<bf16> out16(size_t(N * C)), dx16(size_t(N * C));
    std::vector<float> mean16(static_cast<size_t>(N)), rstd16(static_cast<size_t>(N));
    be->layernorm_forward(out16.data(), mean16.data(), rstd16.data(), x16.data(), w.data(), b.data(), N, C);
    be->layernorm_backward(dx16.data(), dw16.data(), db16.data(), g16.data(), x16.data(), w.data(), mean16.data(),
                           rstd16.data(), N, C);
    // bf16 outputs: one rounding each, relative error <= 2^-8, so NMSE <= 2^-16 ~ 1.5e-5
    require_nmse("out", to_f32(out16), out, 2e-5);
    require_nmse("dinp", to_f32(dx16), dx, 2e-5);
    require_nmse("dweight", dw16, dw, 1e-10);
    require_nmse("dbias", db16, db, 1e-10);
}
