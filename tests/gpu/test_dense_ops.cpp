// GPU tests of the dense ops against the CPU backend: cuBLASLt matmul (every transpose and dtype),
// elementwise ops and the grad-norm reduction, SwiGLU, LayerNorm and the embedding. Tolerances are
// normalized MSE; bf16 outputs allow about one rounding difference per element.
#include <cmath>
#include <cstring>
#include <tuple>

#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {
// bf16 outputs, different fp32 summation order. Both sides round (nearly) the same fp32 value, so
// they differ only where the two fp32 sums straddle a rounding boundary, by one bf16 ulp (relative
// <= 2^-7): NMSE <= share_differing * 2^-14. Even if every element rounded independently on both
// sides the NMSE would be 2 * 2^-14/12 = 1.0e-5; 1e-6 allows ~10% of elements to round differently.
constexpr double kBf16 = 1e-6;
constexpr double kF32 = 1e-9;      // fp32 outputs, different summation order

template <class T>
std::vector<T> make(int64_t n, uint32_t seed);
template <>
std::vector<float> make<float>(int64_t n, uint32_t seed) { return round_to_bf16(random_vector(n, seed)); }
template <>
std::vector<bf16> make<bf16>(int64_t n, uint32_t seed) { return random_bf16(n, seed); }

template <class TA, class TB, class TC>
void check_matmul(const MatmulShape& s, uint32_t seed) {
    auto cpu = cpu_backend();
    const auto a = make<TA>(s.m * s.k, seed), b = make<TB>(s.k * s.n, seed + 1);
    auto c_cpu = make<TC>(s.m * s.n, seed + 2);
    Dev<TA> da(a);
    Dev<TB> db(b);
    Dev<TC> dc(c_cpu);
    cpu->matmul(c_cpu.data(), a.data(), b.data(), s);
    gpu().matmul(dc.p, da.p, db.p, s);
    const double limit = sizeof(TC) == 2 ? kBf16 : kF32;
    INFO("m " << s.m << " n " << s.n << " k " << s.k << " ta " << s.trans_a << " tb " << s.trans_b << " beta "
              << s.beta << " A " << sizeof(TA) << "B, B " << sizeof(TB) << "B, C " << sizeof(TC) << "B");
    require_close("matmul", dc.get(), c_cpu, limit);
}
}  // namespace

TEST_CASE("gpu matmul matches the CPU for every transpose, dtype and beta") {
    SKEW_REQUIRE_GPU();
    for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
            for (float beta : {0.0f, 1.0f}) {
                const MatmulShape s{67, 129, 96, bool(ta), bool(tb), 1.0f, beta};
                check_matmul<bf16, bf16, float>(s, 10);
                check_matmul<bf16, bf16, bf16>(s, 20);
                check_matmul<float, float, float>(s, 30);  // the router's fp32 variant
                check_matmul<bf16, float, float>(s, 40);   // widened: x (bf16) · Wr (fp32)
                check_matmul<float, float, bf16>(s, 50);   // widened: fp32 operands into a bf16 C
                check_matmul<float, bf16, bf16>(s, 80);    // widened: fp32 d_stream · bf16 weight -> bf16 dinp
                check_matmul<float, bf16, float>(s, 90);   // widened: fp32 d_stream^T · bf16 input -> fp32 dweight
            }
}

TEST_CASE("gpu matmul with an empty reduction scales C by beta") {
    SKEW_REQUIRE_GPU();
    check_matmul<bf16, bf16, float>(MatmulShape{8, 16, 0, false, true, 1.0f, 1.0f}, 60);
    check_matmul<bf16, bf16, float>(MatmulShape{8, 16, 0, false, true, 1.0f, 0.0f}, 61);
    check_matmul<bf16, bf16, float>(MatmulShape{0, 16, 8, false, true, 1.0f, 0.0f}, 62);
}

TEST_CASE("gpu matmul at a model shape (linear forward and both gradients)") {
    SKEW_REQUIRE_GPU();
    check_matmul<bf16, bf16, bf16>(MatmulShape{512, 1024, 768, false, true}, 70);
    check_matmul<bf16, bf16, bf16>(MatmulShape{512, 768, 1024, false, false}, 71);
    check_matmul<bf16, bf16, float>(MatmulShape{1024, 768, 512, true, false, 1.0f, 1.0f}, 72);
}

TEST_CASE("gpu elementwise ops equal the CPU bit for bit") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 100003;
    const auto a = random_bf16(n, 1), b = random_bf16(n, 2);
    {
        std::vector<bf16> out(static_cast<size_t>(n));
        Dev<bf16> da(a), db(b), dout(static_cast<size_t>(n));
        cpu->residual_forward(out.data(), a.data(), b.data(), n);
        gpu().residual_forward(dout.p, da.p, db.p, n);
        require_bitwise_equal("residual_forward", dout.get(), out);
    }
    const auto f = random_vector(n, 3);
    for (int d32 = 0; d32 < 2; ++d32)
        for (int s32 = 0; s32 < 2; ++s32) {
            std::vector<float> dst_f = random_vector(n, 4);
            std::vector<bf16> dst_b = to_bf16(dst_f);
            Dev<float> gdf(dst_f), gsf(f);
            Dev<bf16> gdb(dst_b), gsb(a);
            TensorRef cd = d32 ? TensorRef(dst_f.data()) : TensorRef(dst_b.data());
            ConstTensorRef cs = s32 ? ConstTensorRef(f.data()) : ConstTensorRef(a.data());
            TensorRef gd = d32 ? TensorRef(gdf.p) : TensorRef(gdb.p);
            ConstTensorRef gs = s32 ? ConstTensorRef(gsf.p) : ConstTensorRef(gsb.p);
            cpu->accumulate(cd, cs, n);
            gpu().accumulate(gd, gs, n);
            cpu->scale(cd, 0.37f, n);
            gpu().scale(gd, 0.37f, n);
            INFO("dst fp32 " << d32 << " src fp32 " << s32);
            if (d32) require_bitwise_equal("accumulate+scale", gdf.get(), dst_f);
            else require_bitwise_equal("accumulate+scale", gdb.get(), dst_b);
            cpu->convert(cd, cs, n);
            gpu().convert(gd, gs, n);
            if (d32) require_bitwise_equal("convert", gdf.get(), dst_f);
            else require_bitwise_equal("convert", gdb.get(), dst_b);
            gpu().zero(gd, n);
            if (d32) require_bitwise_equal("zero", gdf.get(), std::vector<float>(static_cast<size_t>(n), 0.0f));
            else require_bitwise_equal("zero", gdb.get(), std::vector<bf16>(static_cast<size_t>(n), bf16{0}));
        }
}

TEST_CASE("gpu sum of squares over many buffers is one deterministic reduction") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const auto x1 = random_vector(300001, 1), x2 = random_vector(17, 2), x3 = random_vector(1 << 18, 3);
    const auto b1 = random_bf16(99999, 4);
    Dev<float> d1(x1), d2(x2), d3(x3);
    Dev<bf16> db1(b1);
    const std::vector<BufferRef> cb{{x1.data(), int64_t(x1.size())}, {b1.data(), int64_t(b1.size())},
                                    {x2.data(), int64_t(x2.size())}, {nullptr, 0}, {x3.data(), int64_t(x3.size())}};
    const std::vector<BufferRef> gb{{d1.p, int64_t(x1.size())}, {db1.p, int64_t(b1.size())},
                                    {d2.p, int64_t(x2.size())}, {nullptr, 0}, {d3.p, int64_t(x3.size())}};
    const double ref = cpu->sum_squares(cb);
    const double got = gpu().sum_squares(gb);
    INFO("cpu " << ref << " gpu " << got);
    CHECK(std::fabs(got - ref) <= 1e-10 * ref);
    const double again = gpu().sum_squares(gb);  // deterministic: a second run, bit for bit
    CHECK(std::memcmp(&again, &got, sizeof(double)) == 0);
}

TEST_CASE("gpu dot_accumulate adds alpha times the sub-matrix dot product, in a fixed order") {
    SKEW_REQUIRE_GPU();
    // a (rows, cols) window of a (rows, ld) matrix, as the deferred Gram norm reads it; the output
    // one float of a buffer at an odd offset (4-byte aligned only)
    const std::tuple<int64_t, int64_t, int64_t> shapes[] = {{1, 1, 1}, {7, 13, 13}, {300, 257, 384}, {1024, 1024, 1024}};
    for (const auto& [rows, cols, ld] : shapes) {
        INFO(rows << " x " << cols << " of ld " << ld);
        const auto a = random_vector(rows * ld, 11), b = random_vector(rows * ld, 12);
        double ref = 0.0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) ref += double(a[size_t(r * ld + c)]) * double(b[size_t(r * ld + c)]);
        Dev<float> da(a), db(b), out(std::vector<float>{0.0f, 0.0f, 0.5f, 0.0f});
        gpu().dot_accumulate(out.p + 2, da.p, db.p, rows, cols, ld, 2.0f);
        const float got = out.get()[2];
        CHECK(std::fabs(double(got) - (0.5 + 2.0 * ref)) <= 1e-6 * (std::fabs(0.5 + 2.0 * ref) + double(cols * rows) * 1e-3));
        CHECK(out.get()[1] == 0.0f);  // nothing else written
        CHECK(out.get()[3] == 0.0f);
        Dev<float> again(std::vector<float>{0.0f, 0.0f, 0.5f, 0.0f});
        gpu().dot_accumulate(again.p + 2, da.p, db.p, rows, cols, ld, 2.0f);
        CHECK(again.get()[2] == got);  // deterministic
        // the CPU backend: the same value within fp32 rounding of the sum
        float cpu_out = 0.5f;
        cpu_backend()->dot_accumulate(&cpu_out, a.data(), b.data(), rows, cols, ld, 2.0f);
        CHECK(std::fabs(double(cpu_out) - double(got)) <= 1e-5 * (std::fabs(double(got)) + 1.0));
    }
    CHECK_THROWS_AS(gpu().dot_accumulate(nullptr, nullptr, nullptr, 2, 4, 3, 1.0f), skew::Error);  // ld < cols
}

TEST_CASE("gpu SwiGLU forward and backward match the CPU (vector and scalar paths)") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    for (const int64_t n : {65536, 65537}) {  // n % 8 == 0 takes the 16-byte path
        INFO("n " << n);
        const auto a = to_bf16(random_vector(n, 1, -6.0f, 6.0f)), b = random_bf16(n, 2), dh = random_bf16(n, 3);
        std::vector<bf16> h(static_cast<size_t>(n)), da(static_cast<size_t>(n)), db(static_cast<size_t>(n));
        Dev<bf16> ga(a), gb(b), gdh(dh), gh(static_cast<size_t>(n)), gda(static_cast<size_t>(n)), gdb(static_cast<size_t>(n));
        cpu->swiglu_forward(h.data(), a.data(), b.data(), n);
        gpu().swiglu_forward(gh.p, ga.p, gb.p, n);
        cpu->swiglu_backward(da.data(), db.data(), dh.data(), a.data(), b.data(), n);
        gpu().swiglu_backward(gda.p, gdb.p, gdh.p, ga.p, gb.p, n);
        // expf differs from libm by an ulp or so: allow a rare bf16 rounding flip.
        require_close("swiglu h", gh.get(), h, 1e-6);
        require_close("swiglu da", gda.get(), da, 1e-6);
        require_close("swiglu db", gdb.get(), db, 1e-6);
    }
}

TEST_CASE("gpu LayerNorm forward and backward match the CPU") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    for (int64_t C : {96, 768, 1000}) {
        const int64_t rows = 300;
        const auto x = to_bf16(random_vector(rows * C, 1, -2.0f, 3.0f));
        const auto w = random_vector(C, 2, 0.5f, 1.5f), bias = random_vector(C, 3);
        const auto dout = random_bf16(rows * C, 4);
        std::vector<bf16> out(static_cast<size_t>(rows * C));
        std::vector<float> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows)), dw = random_vector(C, 6), db = random_vector(C, 7);
        Dev<bf16> gx(x), gout(out), gdout(dout);
        Dev<float> gw(w), gbias(bias), gmean(mean), grstd(rstd), gdw(dw), gdb(db);
        cpu->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), rows, C, 1e-5f);
        gpu().layernorm_forward(gout.p, gmean.p, grstd.p, gx.p, gw.p, gbias.p, rows, C, 1e-5f);
        INFO("C " << C);
        require_close("layernorm out", gout.get(), out, kBf16);
        require_close("layernorm mean", gmean.get(), mean, kF32);
        require_close("layernorm rstd", grstd.get(), rstd, kF32);
        // backward from the CPU's saved statistics on both sides; dinp accumulated (the residual
        // stream) or overwritten; dweight and dbias accumulate over both calls
        Dev<float> cmean(mean), crstd(rstd);
        for (const bool acc : {true, false}) {
            INFO("accumulate_dinp " << acc);
            std::vector<bf16> dinp = random_bf16(rows * C, acc ? 5 : 8);
            Dev<bf16> gdinp(dinp);
            cpu->layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                    rstd.data(), rows, C, acc);
            gpu().layernorm_backward(gdinp.p, gdw.p, gdb.p, gdout.p, gx.p, gw.p, cmean.p, crstd.p, rows, C, acc);
            require_close("layernorm dinp", gdinp.get(), dinp, kBf16);
            require_close("layernorm dweight", gdw.get(), dw, 1e-8);
            require_close("layernorm dbias", gdb.get(), db, 1e-8);
        }
    }
}

TEST_CASE("gpu embedding forward and deterministic backward match the CPU, repeated tokens included") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    // 650 positions: more than one 512-key chunk of the counting sort, so a repeated token's rows
    // are summed across chunks (the order must still be increasing position).
    const int64_t B = 5, T = 130, C = 80, V = 1000;
    std::vector<int32_t> tokens(static_cast<size_t>(B * T));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % 13 == 0 ? 5 : (i * 104729) % V);
    const auto wte = random_bf16(V * C, 1), wpe = random_bf16(T * C, 2), dout = random_bf16(B * T * C, 3);
    std::vector<bf16> out(static_cast<size_t>(B * T * C));
    Dev<int32_t> gtok(tokens);
    Dev<bf16> gwte(wte), gwpe(wpe), gout(out.size()), gdout(dout);
    cpu->embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
    gpu().embedding_forward(gout.p, gtok.p, gwte.p, gwpe.p, B, T, C, V);
    require_bitwise_equal("embedding out", gout.get(), out);  // one add, one rounding
    for (int f32grad = 0; f32grad < 2; ++f32grad) {
        std::vector<float> dwte_f = random_vector(V * C, 4), dwpe_f = random_vector(T * C, 5);
        std::vector<bf16> dwte_b = to_bf16(dwte_f), dwpe_b = to_bf16(dwpe_f);
        Dev<float> gdwte_f(dwte_f), gdwpe_f(dwpe_f);
        Dev<bf16> gdwte_b(dwte_b), gdwpe_b(dwpe_b);
        if (f32grad) {
            cpu->embedding_backward(dwte_f.data(), dwpe_f.data(), dout.data(), tokens.data(), B, T, C, V);
            gpu().embedding_backward(gdwte_f.p, gdwpe_f.p, gdout.p, gtok.p, B, T, C, V);
            // rows summed in increasing position on both sides: the same fp32 additions, bit for bit
            require_bitwise_equal("embedding dwte fp32", gdwte_f.get(), dwte_f);
            require_bitwise_equal("embedding dwpe fp32", gdwpe_f.get(), dwpe_f);
        } else {
            cpu->embedding_backward(dwte_b.data(), dwpe_b.data(), dout.data(), tokens.data(), B, T, C, V);
            gpu().embedding_backward(gdwte_b.p, gdwpe_b.p, gdout.p, gtok.p, B, T, C, V);
            require_bitwise_equal("embedding dwte bf16", gdwte_b.get(), dwte_b);
            require_bitwise_equal("embedding dwpe bf16", gdwpe_b.get(), dwpe_b);
        }
    }
}

TEST_CASE("gpu embedding reports a token outside the vocabulary") {
    SKEW_REQUIRE_GPU();
    const int64_t B = 1, T = 4, C = 8, V = 10;
    Dev<int32_t> gtok(std::vector<int32_t>{1, 2, 10, 3});
    Dev<bf16> gwte(random_bf16(V * C, 1)), gwpe(random_bf16(T * C, 2)), gout(static_cast<size_t>(B * T * C));
    gpu().embedding_forward(gout.p, gtok.p, gwte.p, gwpe.p, B, T, C, V);
    CHECK_THROWS_AS(gpu().synchronize(), skew::Error);
    CHECK_NOTHROW(gpu().synchronize());  // the word is cleared after reporting
}

TEST_CASE("gpu copies to and from the device round-trip through the backend's stream") {
    SKEW_REQUIRE_GPU();
    const auto x = random_vector(4099, 1);
    Dev<float> d(x.size());
    gpu().copy_to_device(d.p, x.data(), int64_t(x.size() * sizeof(float)));
    std::vector<float> back(x.size());
    gpu().copy_to_host(back.data(), d.p, int64_t(back.size() * sizeof(float)));
    CHECK(back == x);
}
