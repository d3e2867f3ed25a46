// Tests of the SwiGLU activation h = silu(a) * b (kernels/cpu/swiglu.cpp): the formula, and both
// input gradients against finite differences.
#include "kernels/common/activations.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("swiglu computes silu of the gate times the up projection") {
    const std::vector<float> a{-3.0f, -0.5f, 0.0f, 0.5f, 3.0f}, b{1.0f, 2.0f, 3.0f, -1.0f, 0.5f};
    std::vector<float> h(a.size());
    cpu::swiglu_forward(h.data(), a.data(), b.data(), int64_t(a.size()));
    for (size_t i = 0; i < a.size(); ++i) {
        const double silu = a[i] / (1.0 + std::exp(-double(a[i])));
        REQUIRE(h[i] == Approx(silu * b[i]).epsilon(1e-6));
    }
}

TEST_CASE("swiglu gradients match finite differences") {
    const int64_t n = 40;
    auto a = random_vector(n, 1, -4.0f, 4.0f), b = random_vector(n, 2, -2.0f, 2.0f);
    const auto r = random_vector(n, 3);
    auto loss = [&] {
        std::vector<float> h(static_cast<size_t>(n));
        cpu::swiglu_forward(h.data(), a.data(), b.data(), n);
        return dot(h, r);
    };
    std::vector<float> da(static_cast<size_t>(n)), db(static_cast<size_t>(n));
    cpu::swiglu_backward(da.data(), db.data(), r.data(), a.data(), b.data(), n);
    // elementwise, eps 1e-3: truncation ~1e-7, rounding ~1e-4
    check_gradient("da", da, fd_gradient(a, loss, 1e-3f), 2e-4, 1e-3);
    check_gradient("db", db, fd_gradient(b, loss, 1e-3f), 2e-4, 1e-3);
}
