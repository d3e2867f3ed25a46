// Tests of dropless MoE dispatch (kernels/cpu/moe_dispatch.cpp): the stable counting sort by expert,
// gather and weighted combine, grouped expert matmuls over variable token counts, an expert with
// no tokens receiving zero gradient, and the whole chain x -> experts -> combine against finite
// differences for the input, the expert weights and the gates.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// A routing plan for n tokens, top-k experts each (distinct per token), expert `empty` unused.
std::vector<int32_t> make_routing(int64_t n, int64_t k, int64_t E, int32_t empty, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<int32_t> idx(size_t(n * k));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            int32_t e;
            bool again;
            do {
                e = int32_t(gen() % uint32_t(E));
                again = e == empty;
                for (int64_t i = 0; i < j; ++i) again |= idx[size_t(t * k + i)] == e;
            } while (again);
            idx[size_t(t * k + j)] = e;
        }
    return idx;
}

struct Plan {
    std::vector<int64_t> sorted_to_copy, copy_to_sorted, offsets;
};

Plan dispatch(const std::vector<int32_t>& idx, int64_t n, int64_t k, int64_t E) {
    Plan p{std::vector<int64_t>(size_t(n * k)), std::vector<int64_t>(size_t(n * k)),
           std::vector<int64_t>(size_t(E + 1))};
    cpu::moe_dispatch(p.sorted_to_copy.data(), p.copy_to_sorted.data(), p.offsets.data(), idx.data(), n, k, E);
    return p;
}

}  // namespace

TEST_CASE("dispatch is a stable counting sort of the token copies by expert") {
    const int64_t n = 9, k = 2, E = 4;
    const auto idx = make_routing(n, k, E, 2, 1);
    const auto p = dispatch(idx, n, k, E);
    REQUIRE(p.offsets[0] == 0);
    REQUIRE(p.offsets[size_t(E)] == n * k);
    REQUIRE(p.offsets[3] - p.offsets[2] == 0);  // expert 2 receives nothing
    for (int64_t e = 0; e < E; ++e)
        for (int64_t q = p.offsets[size_t(e)]; q < p.offsets[size_t(e + 1)]; ++q) {
            REQUIRE(idx[size_t(p.sorted_to_copy[size_t(q)])] == e);
            if (q > p.offsets[size_t(e)]) REQUIRE(p.sorted_to_copy[size_t(q)] > p.sorted_to_copy[size_t(q - 1)]);
        }
    for (int64_t j = 0; j < n * k; ++j) REQUIRE(p.sorted_to_copy[size_t(p.copy_to_sorted[size_t(j)])] == j);
    std::vector<int32_t> bad(idx);
    bad[3] = int32_t(E);
    REQUIRE_THROWS_AS(dispatch(bad, n, k, E), Error);
}

TEST_CASE("expert gradients match finite differences and an expert that receives no tokens has zero gradient") {
    // y = combine(gates, experts(gather(x))), expert e: W_e (out, in); loss = Σ y·r
    const int64_t n = 5, k = 2, E = 4, C = 3, F = 2;
    const int32_t empty = 1;
    const auto idx = make_routing(n, k, E, empty, 2);
    const auto p = dispatch(idx, n, k, E);
    auto x = random_vector(n * C, 3), w = random_vector(E * F * C, 4), gates = random_vector(n * k, 5, 0.1f, 1.0f);
    const auto r = random_vector(n * F, 6);
    auto forward = [&](std::vector<float>& xs, std::vector<float>& ys) {
        xs.assign(size_t(n * k * C), 0.0f);
        ys.assign(size_t(n * k * F), 0.0f);
        std::vector<float> y(size_t(n * F));
        cpu::moe_gather_forward(xs.data(), x.data(), p.sorted_to_copy.data(), n, k, C);
        cpu::moe_matmul_forward(ys.data(), xs.data(), w.data(), p.offsets.data(), E, C, F);
        cpu::moe_combine_forward(y.data(), ys.data(), gates.data(), p.copy_to_sorted.data(), n, k, F);
        return y;
    };
    auto loss = [&] {
        std::vector<float> xs, ys;
        return dot(forward(xs, ys), r);
    };
    std::vector<float> xs, ys;
    forward(xs, ys);
    std::vector<float> dys(size_t(n * k * F)), dgates(size_t(n * k)), dxs(size_t(n * k * C)), dx(size_t(n * C));
    std::vector<float> dw(size_t(E * F * C), 0.0f);
    cpu::moe_combine_backward(dys.data(), dgates.data(), r.data(), ys.data(), gates.data(), p.copy_to_sorted.data(), n,
                              k, F);
    cpu::moe_matmul_backward(dxs.data(), dw.data(), dys.data(), xs.data(), w.data(), p.offsets.data(), E, C, F, false);
    cpu::moe_gather_backward(dx.data(), dxs.data(), p.copy_to_sorted.data(), n, k, C, false);
    // multilinear in each argument: FD exact up to fp32 rounding of the loss
    check_gradient("dx", dx, fd_gradient(x, loss, 1e-2f), 1e-4, 1e-3);
    check_gradient("dweight", dw, fd_gradient(w, loss, 1e-2f), 1e-4, 1e-3);
    check_gradient("dgates", dgates, fd_gradient(gates, loss, 1e-2f), 1e-4, 1e-3);
    for (int64_t i = 0; i < F * C; ++i) REQUIRE(dw[size_t(empty * F * C + i)] == 0.0f);

    // the grouped backward's input gradient accumulates on request (the second SwiGLU branch)
    std::vector<float> dxs2(dxs.size(), 1.0f);
    cpu::moe_matmul_backward(dxs2.data(), nullptr, dys.data(), xs.data(), w.data(), p.offsets.data(), E, C, F, true);
    for (size_t i = 0; i < dxs.size(); ++i) REQUIRE(dxs2[i] == Approx(dxs[i] + 1.0f).margin(1e-6));

    // gather backward accumulates on request (the router's contribution to the same dx)
    std::vector<float> dx2(dx.size(), 1.0f);
    cpu::moe_gather_backward(dx2.data(), dxs.data(), p.copy_to_sorted.data(), n, k, C, true);
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx2[i] == Approx(dx[i] + 1.0f).margin(1e-6));
}

TEST_CASE("grouped expert matmul in bf16 matches one matmul per expert") {
    auto be = make_cpu_backend();
    const int64_t n = 32, k = 2, E = 8, C = 16, F = 24;
    const auto idx = make_routing(n, k, E, 5, 7);
    const auto p = dispatch(idx, n, k, E);
    const auto x = to_bf16(random_vector(n * C, 8)), w = to_bf16(random_vector(E * F * C, 9));
    const auto g = to_bf16(random_vector(n * k * F, 10));
    std::vector<bf16> xs(size_t(n * k * C)), ys(size_t(n * k * F)), dxs(size_t(n * k * C));
    std::vector<float> dw(size_t(E * F * C), 0.0f);
    be->moe_gather_forward(xs.data(), x.data(), p.sorted_to_copy.data(), n, k, C);
    be->moe_matmul_forward(ys.data(), xs.data(), w.data(), p.offsets.data(), E, C, F);
    be->moe_matmul_backward(dxs.data(), dw.data(), g.data(), xs.data(), w.data(), p.offsets.data(), E, C, F);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = p.offsets[size_t(e)], rows = p.offsets[size_t(e + 1)] - r0;
        std::vector<bf16> y(size_t(rows * F)), dxe(size_t(rows * C));
        std::vector<float> dwe(size_t(F * C), 0.0f);
        be->matmul_forward(y.data(), xs.data() + r0 * C, w.data() + e * F * C, rows, C, F);
        be->matmul_backward(dxe.data(), dwe.data(), g.data() + r0 * F, xs.data() + r0 * C, w.data() + e * F * C, rows,
                            C, F);
        for (int64_t i = 0; i < rows * F; ++i) REQUIRE(ys[size_t(r0 * F + i)].bits == y[size_t(i)].bits);
        for (int64_t i = 0; i < rows * C; ++i) REQUIRE(dxs[size_t(r0 * C + i)].bits == dxe[size_t(i)].bits);
        for (int64_t i = 0; i < F * C; ++i) REQUIRE(dw[size_t(e * F * C + i)] == dwe[size_t(i)]);
    }
    for (int64_t i = 0; i < F * C; ++i) REQUIRE(dw[size_t(5 * F * C + i)] == 0.0f);  // expert 5 had no tokens

    // And against a reference independent of every matmul kernel: the sums in double, each row
    // multiplied by its own expert's W (found from the offsets). bf16 outputs are one rounding of an
    // fp32 sum of C or F products: within one bf16 ulp; fp32 dW within 1e-5 relative (+1e-6).
    const auto xf = to_f32(xs), wf = to_f32(w), gf = to_f32(g), yf = to_f32(ys), dxf = to_f32(dxs);
    auto bf16_ulp = [](double v) { return std::ldexp(1.0, std::ilogb(std::max(std::fabs(v), 1e-30)) - 7); };
    int64_t checked = 0;
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = p.offsets[size_t(e)]; r < p.offsets[size_t(e + 1)]; ++r) {
            for (int64_t f = 0; f < F; ++f) {
                double ref = 0.0;
                for (int64_t c = 0; c < C; ++c) ref += double(xf[size_t(r * C + c)]) * wf[size_t((e * F + f) * C + c)];
                INFO("y row " << r << " (expert " << e << ") col " << f << ": " << yf[size_t(r * F + f)] << " vs "
                              << ref);
                CHECK(std::fabs(yf[size_t(r * F + f)] - ref) <= bf16_ulp(ref));
                ++checked;
            }
            for (int64_t c = 0; c < C; ++c) {
                double ref = 0.0;
                for (int64_t f = 0; f < F; ++f) ref += double(gf[size_t(r * F + f)]) * wf[size_t((e * F + f) * C + c)];
                INFO("dx row " << r << " col " << c << ": " << dxf[size_t(r * C + c)] << " vs " << ref);
                CHECK(std::fabs(dxf[size_t(r * C + c)] - ref) <= bf16_ulp(ref));
            }
        }
    for (int64_t e = 0; e < E; ++e)
        for (int64_t f = 0; f < F; ++f)
            for (int64_t c = 0; c < C; ++c) {
                double ref = 0.0;
                for (int64_t r = p.offsets[size_t(e)]; r < p.offsets[size_t(e + 1)]; ++r)
                    ref += double(gf[size_t(r * F + f)]) * xf[size_t(r * C + c)];
                const double got = dw[size_t((e * F + f) * C + c)];
                INFO("dW expert " << e << " (" << f << ", " << c << "): " << got << " vs " << ref);
                CHECK(std::fabs(got - ref) <= 1e-5 * std::fabs(ref) + 1e-6);
            }
    CHECK(checked == n * k * F);  // every routed copy was compared
}
