// Tests of the token + learned position embedding (kernels/cpu/embedding.cpp): the forward sum,
// gradients to both tables against finite differences, deterministic accumulating backward with
// repeated tokens, and a clear error for a token outside the vocabulary.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("embedding adds the token row and the position row") {
    const int64_t B = 2, T = 3, C = 4, V = 5;
    const auto wte = random_vector(V * C, 1), wpe = random_vector(T * C, 2);
    const std::vector<int32_t> tok{4, 0, 4, 2, 2, 1};
    std::vector<float> out(size_t(B * T * C));
    cpu::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, V);
    for (int64_t i = 0; i < B * T; ++i)
        for (int64_t c = 0; c < C; ++c)
            REQUIRE(out[size_t(i * C + c)] == wte[size_t(tok[size_t(i)] * C + c)] + wpe[size_t((i % T) * C + c)]);
}

TEST_CASE("embedding gradients match finite differences") {
    const int64_t B = 2, T = 3, C = 4, V = 5;
    auto wte = random_vector(V * C, 3), wpe = random_vector(T * C, 4);
    const std::vector<int32_t> tok{4, 0, 4, 2, 4, 1};  // token 4 three times, token 3 never
    const auto r = random_vector(B * T * C, 5);
    auto loss = [&] {
        std::vector<float> out(size_t(B * T * C));
        cpu::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, V);
        return dot(out, r);
    };
    std::vector<float> dwte(size_t(V * C), 0.0f), dwpe(size_t(T * C), 0.0f);
    cpu::embedding_backward(dwte.data(), dwpe.data(), r.data(), tok.data(), B, T, C, V);
    // linear: exact up to fp32 rounding of the loss
    check_gradient("dwte", dwte, fd_gradient(wte, loss, 1e-2f), 1e-4, 1e-3);
    check_gradient("dwpe", dwpe, fd_gradient(wpe, loss, 1e-2f), 1e-4, 1e-3);
    for (int64_t c = 0; c < C; ++c) REQUIRE(dwte[size_t(3 * C + c)] == 0.0f);  // unused token row
}

TEST_CASE("embedding backward accumulates deterministically in bf16") {
    auto be = make_cpu_backend();
    const int64_t B = 4, T = 16, C = 8, V = 7;
    std::vector<int32_t> tok(size_t(B * T));
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 5) % 3);  // heavy repetition
    const auto dout = to_bf16(random_vector(B * T * C, 6));
    std::vector<float> g1(size_t(V * C), 0.25f), g2(g1);
    std::vector<bf16> p1(size_t(T * C), f32_to_bf16(0.0f)), p2(p1);
    be->embedding_backward(g1.data(), p1.data(), dout.data(), tok.data(), B, T, C, V);
    be->embedding_backward(g2.data(), p2.data(), dout.data(), tok.data(), B, T, C, V);
    REQUIRE(g1 == g2);
    for (size_t i = 0; i < p1.size(); ++i) REQUIRE(p1[i].bits == p2[i].bits);
    // accumulating: a second call adds the same amount again
    const auto once = g1;
    be->embedding_backward(g1.data(), nullptr, dout.data(), tok.data(), B, T, C, V);
    for (size_t i = 0; i < g1.size(); ++i) REQUIRE(g1[i] - 0.25f == Approx(2.0f * (once[i] - 0.25f)).margin(1e-5));
}

TEST_CASE("embedding rejects a token outside the vocabulary") {
    auto be = make_cpu_backend();
    std::vector<bf16> wte(8), wpe(8), out(8);
    const std::vector<int32_t> tok{0, 4};
    REQUIRE_THROWS_AS(be->embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), 1, 2, 4, 2), Error);
}
