// Tests of the elementwise ops and reductions (kernels/cpu/elementwise.cpp): residual add, mixed-
// dtype accumulation, scaling, conversion, and the global grad-norm's sum of squares in double
// over many buffers of both dtypes, then clipping by in-place scaling.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("residual add sums in fp32 and rounds once") {
    auto be = make_cpu_backend();
    const std::vector<bf16> a{f32_to_bf16(1.0f), f32_to_bf16(256.0f)}, b{f32_to_bf16(1.0f / 512), f32_to_bf16(1.0f)};
    std::vector<bf16> out(2);
    be->residual_forward(out.data(), a.data(), b.data(), 2);
    REQUIRE(bf16_to_f32(out[0]) == 1.0f);                       // 1 + 2^-9 rounds to 1 (half an ulp below)
    REQUIRE(bf16_to_f32(out[1]) == 256.0f);                     // 257 ties to even (256)
    be->residual_forward(out.data(), out.data(), a.data(), 2);  // aliasing allowed
    REQUIRE(bf16_to_f32(out[0]) == 2.0f);
}

TEST_CASE("accumulate, scale, zero and convert work across dtypes") {
    auto be = make_cpu_backend();
    std::vector<float> f{1.0f, 2.0f, 3.0f};
    std::vector<bf16> h{f32_to_bf16(0.5f), f32_to_bf16(-1.0f), f32_to_bf16(4.0f)};
    be->accumulate(f.data(), h.data(), 3);
    REQUIRE(f == std::vector<float>{1.5f, 1.0f, 7.0f});
    be->accumulate(h.data(), f.data(), 3);
    REQUIRE(to_f32(h) == std::vector<float>{2.0f, 0.0f, 11.0f});
    be->scale(f.data(), 0.5f, 3);
    REQUIRE(f == std::vector<float>{0.75f, 0.5f, 3.5f});
    be->convert(h.data(), f.data(), 3);
    REQUIRE(to_f32(h) == std::vector<float>{0.75f, 0.5f, 3.5f});
    be->zero(h.data(), 3);
    REQUIRE(to_f32(h) == std::vector<float>{0.0f, 0.0f, 0.0f});
}

TEST_CASE("global grad norm sums squares over many buffers in double and clipping rescales it") {
    auto be = make_cpu_backend();
    auto a = random_vector(200'000, 1);  // spans several reduction blocks
    auto b16 = to_bf16(random_vector(1'000, 2));
    std::vector<float> c(10, 3.0f);
    double ref = 0.0;
    for (float x : a) ref += double(x) * x;
    for (bf16 x : b16) ref += double(bf16_to_f32(x)) * bf16_to_f32(x);
    for (float x : c) ref += double(x) * x;
    const std::vector<BufferRef> bufs{
        {a.data(), int64_t(a.size())}, {b16.data(), int64_t(b16.size())}, {c.data(), int64_t(c.size())}};
    const double ss = be->sum_squares(bufs);
    REQUIRE(ss == Approx(ref).epsilon(1e-12));
    REQUIRE(be->sum_squares(bufs) == ss);  // deterministic

    // clip to norm 1: scale every buffer by 1/norm
    const float factor = float(1.0 / std::sqrt(ss));
    be->scale(a.data(), factor, int64_t(a.size()));
    be->scale(b16.data(), factor, int64_t(b16.size()));
    be->scale(c.data(), factor, int64_t(c.size()));
    REQUIRE(be->sum_squares(bufs) == Approx(1.0).epsilon(1e-3));  // bf16 buffer rounds by 2^-8

    std::vector<float> bad{1.0f, INFINITY};
    const std::vector<BufferRef> badbufs{{bad.data(), 2}};
    REQUIRE(std::isinf(be->sum_squares(badbufs)));
}
