// Tests of the CPU matmul (kernels/cpu/matmul.cpp): every transpose and dtype combination against a
// double reference, accumulation with beta = 1 (weight gradients over microbatches), k-panelling of
// bf16 operands, and the linear layer's data and weight gradients against finite differences.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/matmul_args.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// C = alpha op(A) op(B) + beta C in double, row-major.
std::vector<double> ref_matmul(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
                               const MatmulShape& s) {
    std::vector<double> c(size_t(s.m * s.n));
    for (int64_t i = 0; i < s.m; ++i)
        for (int64_t j = 0; j < s.n; ++j) {
            double acc = 0.0;
            for (int64_t p = 0; p < s.k; ++p) {
                const double av = s.trans_a ? a[size_t(p * s.m + i)] : a[size_t(i * s.k + p)];
                const double bv = s.trans_b ? b[size_t(j * s.k + p)] : b[size_t(p * s.n + j)];
                acc += av * bv;
            }
            c[size_t(i * s.n + j)] = s.alpha * acc + (s.beta != 0.0f ? double(s.beta) * c0[size_t(i * s.n + j)] : 0.0);
        }
    return c;
}

}  // namespace

TEST_CASE("matmul matches a double reference for every transpose and dtype") {
    auto be = make_cpu_backend();
    const int64_t m = 5, n = 7, k = 9;
    // bf16-representable inputs: both dtypes see the same values; products are exact in fp32.
    const auto a = round_to_bf16(random_vector(m * k, 1));
    const auto b = round_to_bf16(random_vector(k * n, 2));
    const auto c0 = round_to_bf16(random_vector(m * n, 3));
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (int a_bf = 0; a_bf < 2; ++a_bf)
                for (int b_bf = 0; b_bf < 2; ++b_bf)
                    for (int c_bf = 0; c_bf < 2; ++c_bf)
                        for (float beta : {0.0f, 1.0f}) {
                            MatmulShape s{m, n, k, ta == 1, tb == 1, 0.5f, beta};
                            const auto ref = ref_matmul(a, b, c0, s);
                            auto a16 = to_bf16(a), b16 = to_bf16(b), c16 = to_bf16(c0);
                            auto c32 = c0;
                            ConstTensorRef ar = a_bf ? ConstTensorRef(a16.data()) : ConstTensorRef(a.data());
                            ConstTensorRef br = b_bf ? ConstTensorRef(b16.data()) : ConstTensorRef(b.data());
                            TensorRef cr = c_bf ? TensorRef(c16.data()) : TensorRef(c32.data());
                            be->matmul(cr, ar, br, s);
                            const auto out = c_bf ? to_f32(c16) : c32;
                            // fp32 C: fp32 summation error only (1e-5 relative to the row scale);
                            // bf16 C: one round-to-nearest-even, half an ulp <= 2^-8 relative.
                            const double rtol = c_bf ? 1.0 / 256 : 1e-6;
                            for (size_t i = 0; i < out.size(); ++i) {
                                INFO("ta " << ta << " tb " << tb << " a_bf " << a_bf << " b_bf " << b_bf << " c_bf "
                                           << c_bf << " beta " << beta << " element " << i);
                                REQUIRE(std::fabs(out[i] - ref[i]) <= rtol * std::fabs(ref[i]) + 1e-5);
                            }
                        }
}

TEST_CASE("matmul weight gradient accumulates over microbatches with beta 1") {
    auto be = make_cpu_backend();
    const int64_t n_rows = 6, in_f = 4, out_f = 3;
    const auto x1 = random_vector(n_rows * in_f, 10), x2 = random_vector(n_rows * in_f, 11);
    const auto g1 = random_vector(n_rows * out_f, 12), g2 = random_vector(n_rows * out_f, 13);
    const auto w = random_vector(out_f * in_f, 14);
    std::vector<float> dw(size_t(out_f * in_f), 0.0f), dw1(dw), dw2(dw);
    be->matmul_backward(nullptr, dw.data(), g1.data(), x1.data(), w.data(), n_rows, in_f, out_f);
    be->matmul_backward(nullptr, dw.data(), g2.data(), x2.data(), w.data(), n_rows, in_f, out_f);
    be->matmul_backward(nullptr, dw1.data(), g1.data(), x1.data(), w.data(), n_rows, in_f, out_f);
    be->matmul_backward(nullptr, dw2.data(), g2.data(), x2.data(), w.data(), n_rows, in_f, out_f);
    for (size_t i = 0; i < dw.size(); ++i) REQUIRE(dw[i] == Approx(dw1[i] + dw2[i]).epsilon(1e-6));
}

TEST_CASE("matmul widens bf16 operands in k-panels without changing the result") {
    auto be = make_cpu_backend();
    // (m + n)·k above the 16M-float panel budget: two panels along k.
    const int64_t m = 3, n = 3, k = 3'000'000;
    std::vector<bf16> a(size_t(m * k)), b(size_t(n * k));
    for (int64_t i = 0; i < m * k; ++i) a[size_t(i)] = f32_to_bf16(float((i % 7) - 3) * 0.25f);
    for (int64_t i = 0; i < n * k; ++i) b[size_t(i)] = f32_to_bf16(float((i % 5) - 2) * 0.5f);
    std::vector<float> c(size_t(m * n));
    be->matmul(c.data(), a.data(), b.data(), MatmulShape{m, n, k, false, true});
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double ref = 0.0;
            for (int64_t p = 0; p < k; ++p)
                ref += double(bf16_to_f32(a[size_t(i * k + p)])) * double(bf16_to_f32(b[size_t(j * k + p)]));
            // every product and partial sum is a multiple of 1/8 below 2^24/8: exact in fp32
            REQUIRE(c[size_t(i * n + j)] == float(ref));
        }
}

TEST_CASE("matmul with an empty reduction scales the output by beta") {
    auto be = make_cpu_backend();
    std::vector<float> c{1.0f, 2.0f, 3.0f, 4.0f};
    be->matmul(c.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr),
               MatmulShape{2, 2, 0, false, false, 1.0f, 1.0f});
    REQUIRE(c == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
    be->matmul(c.data(), static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), MatmulShape{2, 2, 0});
    REQUIRE(c == std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f});
    REQUIRE_THROWS_AS(be->matmul(c.data(), c.data(), c.data(), MatmulShape{-1, 2, 2}), Error);
}

TEST_CASE("the shared matmul argument checks refuse negative sizes and null pointers of a non-empty product") {
    std::vector<float> buf(30, 1.0f);
    float* p = buf.data();
    const float* none = nullptr;
    CHECK_THROWS_WITH(matmul_check_args(p, p, p, MatmulShape{-1, 2, 2}), "matmul m: negative size -1");
    CHECK_THROWS_WITH(matmul_check_args(p, p, p, MatmulShape{2, -3, 2}), "matmul n: negative size -3");
    CHECK_THROWS_WITH(matmul_check_args(p, p, p, MatmulShape{2, 2, -4}), "matmul k: negative size -4");
    CHECK_THROWS_WITH(matmul_check_args(nullptr, p, p, MatmulShape{4, 5, 6}), "matmul: null output for a 4x5 product");
    CHECK_THROWS_WITH(matmul_check_args(p, none, p, MatmulShape{4, 5, 6}), "matmul: null operand for a 4x5x6 product");
    CHECK_THROWS_WITH(matmul_check_args(p, p, none, MatmulShape{4, 5, 6}), "matmul: null operand for a 4x5x6 product");
    CHECK_THROWS_AS(matmul_check_args(p, p, p, MatmulShape{-1, 2, 2}), Error);
    // Allowed: an empty product with null pointers, an empty reduction without operands, a full product.
    CHECK_NOTHROW(matmul_check_args(nullptr, none, none, MatmulShape{0, 5, 6}));
    CHECK_NOTHROW(matmul_check_args(nullptr, none, none, MatmulShape{4, 0, 6}));
    CHECK_NOTHROW(matmul_check_args(p, none, none, MatmulShape{4, 5, 0}));
    CHECK_NOTHROW(matmul_check_args(p, p, p, MatmulShape{4, 5, 6}));
    // The CPU backend refuses with the same words.
    auto be = make_cpu_backend();
    CHECK_THROWS_WITH(be->matmul(nullptr, p, p, MatmulShape{4, 5, 6}), "matmul: null output for a 4x5 product");
    CHECK_THROWS_WITH(be->matmul(p, p, p, MatmulShape{2, 2, -4}), "matmul k: negative size -4");
}

TEST_CASE("linear layer gradients match finite differences") {
    auto be = make_cpu_backend();
    const int64_t n_rows = 4, in_f = 5, out_f = 3;
    auto x = random_vector(n_rows * in_f, 20), w = random_vector(out_f * in_f, 21);
    const auto r = random_vector(n_rows * out_f, 22);  // loss = Σ out·r
    auto loss = [&] {
        std::vector<float> out(size_t(n_rows * out_f));
        be->matmul_forward(out.data(), x.data(), w.data(), n_rows, in_f, out_f);
        return dot(out, r);
    };
    std::vector<float> dx(size_t(n_rows * in_f)), dw(size_t(out_f * in_f), 0.0f);
    be->matmul_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), n_rows, in_f, out_f);
    // linear in each input: the finite difference is exact up to fp32 rounding of the loss.
    check_gradient("dx", dx, fd_gradient(x, loss, 1e-2f), 1e-4, 1e-3);
    check_gradient("dw", dw, fd_gradient(w, loss, 1e-2f), 1e-4, 1e-3);
}
