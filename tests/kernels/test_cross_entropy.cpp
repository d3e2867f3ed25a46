// Tests of cross-entropy over the padded vocabulary with the tied LM head
// (kernels/cpu/cross_entropy.cpp, kernels/cpu/lm_head.cpp): padding columns masked, finite and exact
// for logits in the hundreds, the gradient to the logits and the fused chunked LM head against
// finite differences and against the unfused matmul + cross-entropy, and the fused head's result
// independent of the thread count.
#include <omp.h>

#include <cstring>

#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Per-token loss in double over the first V columns.
std::vector<double> ref_losses(const std::vector<float>& logits, const std::vector<int32_t>& tgt, int64_t V,
                               int64_t Vp) {
    std::vector<double> out(tgt.size());
    for (size_t i = 0; i < tgt.size(); ++i) {
        double mx = -1e300, sum = 0.0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(logits[i * size_t(Vp) + size_t(v)]));
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(logits[i * size_t(Vp) + size_t(v)]) - mx);
        out[i] = mx + std::log(sum) - logits[i * size_t(Vp) + size_t(tgt[i])];
    }
    return out;
}

}  // namespace

TEST_CASE("cross-entropy masks the padded vocabulary and stays finite for logits in the hundreds") {
    auto be = make_cpu_backend();
    const int64_t n = 3, V = 5, Vp = 8;
    auto logits = random_vector(n * Vp, 1, 200.0f, 800.0f);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t v = V; v < Vp; ++v) logits[size_t(i * Vp + v)] = 1000.0f;  // padding would dominate if read
    const std::vector<int32_t> tgt{0, 4, 2};
    std::vector<float> losses(static_cast<size_t>(n)), dl(size_t(n * Vp));
    be->cross_entropy_forward(losses.data(), logits.data(), tgt.data(), n, V, Vp);
    const auto ref = ref_losses(logits, tgt, V, Vp);
    for (int64_t i = 0; i < n; ++i) {
        REQUIRE(std::isfinite(losses[size_t(i)]));
        REQUIRE(losses[size_t(i)] == Approx(ref[size_t(i)]).margin(1e-4));
    }
    be->cross_entropy_backward(dl.data(), logits.data(), tgt.data(), 1.0f, n, V, Vp);
    for (int64_t i = 0; i < n; ++i) {
        double row = 0.0;
        for (int64_t v = 0; v < Vp; ++v) {
            REQUIRE(std::isfinite(dl[size_t(i * Vp + v)]));
            if (v >= V) REQUIRE(dl[size_t(i * Vp + v)] == 0.0f);
            row += dl[size_t(i * Vp + v)];
        }
        REQUIRE(std::fabs(row) < 1e-6);  // Σ (p - onehot) = 0 over the real vocabulary
    }
    const std::vector<int32_t> bad{0, 5, 2};  // 5 is a padding id
    REQUIRE_THROWS_AS(be->cross_entropy_forward(losses.data(), logits.data(), bad.data(), n, V, Vp), Error);
}

TEST_CASE("cross-entropy gradient to the logits matches finite differences") {
    auto be = make_cpu_backend();
    const int64_t n = 4, V = 6, Vp = 8;
    auto logits = random_normal(n * Vp, 2, 2.0f);
    const std::vector<int32_t> tgt{5, 0, 3, 3};
    const float dloss = 0.25f;  // e.g. 1 / accum_steps
    auto loss = [&] {
        std::vector<float> losses(static_cast<size_t>(n));
        be->cross_entropy_forward(losses.data(), logits.data(), tgt.data(), n, V, Vp);
        double m = 0.0;
        for (float l : losses) m += l;
        return dloss * m / double(n);
    };
    std::vector<float> dl(size_t(n * Vp));
    be->cross_entropy_backward(dl.data(), logits.data(), tgt.data(), dloss, n, V, Vp);
    // fp32 losses, eps 1e-3: rounding ~1e-5, gradients ~1e-2
    check_gradient("dlogits", dl, fd_gradient(logits, loss, 1e-3f), 5e-5, 1e-2);
}

TEST_CASE("fused LM head cross-entropy matches finite differences for the input and the tied embedding") {
    auto be = make_cpu_backend();
    const ClassifierShape s{5, 4, 6, 8};
    auto x = random_vector(s.n_tokens * s.d_model, 3), wte = random_vector(s.padded_vocab_size * s.d_model, 4);
    const std::vector<int32_t> tgt{1, 5, 0, 2, 5};
    std::vector<char> ws(size_t(be->lm_head_workspace_bytes(s)));
    const float dloss = 0.5f;
    auto loss = [&] {
        float m = 0.0f;
        be->lm_head_cross_entropy(&m, nullptr, nullptr, nullptr, x.data(), wte.data(), tgt.data(), dloss, s, ws.data());
        return double(dloss) * m;
    };
    float mean = 0.0f;
    std::vector<float> losses(static_cast<size_t>(s.n_tokens)), dx(x.size()), dwte(wte.size(), 0.0f);
    be->lm_head_cross_entropy(&mean, losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tgt.data(), dloss, s,
                              ws.data());
    // fp32 mean loss, eps 1e-2: truncation ~1e-5, rounding ~1e-5
    check_gradient("dx", dx, fd_gradient(x, loss, 1e-2f), 1e-4, 1e-2);
    check_gradient("dwte", dwte, fd_gradient(wte, loss, 1e-2f), 1e-4, 1e-2);
    for (int64_t v = s.vocab_size; v < s.padded_vocab_size; ++v)
        for (int64_t c = 0; c < s.d_model; ++c) REQUIRE(dwte[size_t(v * s.d_model + c)] == 0.0f);  // padding rows
}

TEST_CASE("fused LM head in chunks matches the unfused matmul and cross-entropy on the GPT-2 padded vocabulary") {
    auto be = make_cpu_backend();
    const ClassifierShape s{700, 4, 50257, 50304};
    REQUIRE(cpu::lm_head_chunk_tokens(s) < s.n_tokens);  // several chunks
    const auto x = to_bf16(random_vector(s.n_tokens * s.d_model, 5, -4.0f, 4.0f));
    const auto wte = to_bf16(random_vector(s.padded_vocab_size * s.d_model, 6, -4.0f, 4.0f));  // logits up to ~100
    std::vector<int32_t> tgt(static_cast<size_t>(s.n_tokens));
    for (int64_t i = 0; i < s.n_tokens; ++i) tgt[size_t(i)] = int32_t((i * 7919) % s.vocab_size);
    const float dloss = 1.0f;

    std::vector<char> ws(size_t(be->lm_head_workspace_bytes(s)));
    float mean = 0.0f;
    std::vector<float> losses(static_cast<size_t>(s.n_tokens)), dx(size_t(s.n_tokens * s.d_model));
    std::vector<float> dwte(size_t(s.padded_vocab_size * s.d_model), 0.0f);
    be->lm_head_cross_entropy(&mean, losses.data(), dx.data(), dwte.data(), x.data(), wte.data(), tgt.data(), dloss, s,
                              ws.data());

    std::vector<float> logits(size_t(s.n_tokens * s.padded_vocab_size)), ref_l(static_cast<size_t>(s.n_tokens));
    be->matmul_forward(logits.data(), x.data(), wte.data(), s.n_tokens, s.d_model, s.padded_vocab_size);
    be->cross_entropy_forward(ref_l.data(), logits.data(), tgt.data(), s.n_tokens, s.vocab_size, s.padded_vocab_size);
    be->cross_entropy_backward(logits.data(), logits.data(), tgt.data(), dloss, s.n_tokens, s.vocab_size,
                               s.padded_vocab_size);
    std::vector<float> ref_dx(dx.size()), ref_dwte(dwte.size(), 0.0f);
    be->matmul_backward(ref_dx.data(), ref_dwte.data(), logits.data(), x.data(), wte.data(), s.n_tokens, s.d_model,
                        s.padded_vocab_size);
    double ref_mean = 0.0;
    for (float l : ref_l) ref_mean += l;
    ref_mean /= double(s.n_tokens);
    REQUIRE(std::isfinite(mean));
    REQUIRE(mean == Approx(ref_mean).epsilon(1e-6));
    // same fp32 products; only the blocking of the dwte sum over tokens differs
    require_nmse("losses", losses, ref_l, 1e-12);
    require_nmse("dx", dx, ref_dx, 1e-10);
    require_nmse("dwte", dwte, ref_dwte, 1e-10);

    // a bf16 embedding gradient is accumulated in fp32 over the chunks and rounded once
    std::vector<bf16> dwte16(dwte.size(), f32_to_bf16(0.0f));
    be->lm_head_cross_entropy(&mean, nullptr, nullptr, dwte16.data(), x.data(), wte.data(), tgt.data(), dloss, s,
                              ws.data());
    require_nmse("dwte bf16", to_f32(dwte16), ref_dwte, 2e-5);
}

TEST_CASE("the vectorizable exp used by the softmax is within 2 ulp of expf for x <= 0") {
    double worst = 0.0;
    for (int i = 0; i <= 200000; ++i) {
        const float x = -87.0f * float(i) / 200000.0f;
        const double ref = std::exp(double(x));
        const double ulp = std::nextafter(float(ref), INFINITY) - float(ref);
        worst = max_nan(worst, std::fabs(double(cpu::exp_nonpos_f32(x)) - ref) / ulp);
    }
    INFO("worst error " << worst << " ulp");
    REQUIRE(worst <= 2.0);
    REQUIRE(cpu::exp_nonpos_f32(0.0f) == 1.0f);
    REQUIRE(cpu::exp_nonpos_f32(-100.0f) == 0.0f);
    REQUIRE(cpu::exp_nonpos_f32(-INFINITY) == 0.0f);
}

TEST_CASE("the fused LM head gives the same bits on one thread and on several") {
    // Its sums run in an order fixed by the shapes (vocabulary groups merged in order), so the
    // thread count must not change a bit of the loss or of either gradient.
    auto be = make_cpu_backend();
    const ClassifierShape s{600, 8, 9000, 9024};  // two chunks, 36 tiles over 16 groups, padding
    const auto x = to_bf16(random_vector(s.n_tokens * s.d_model, 11, -3.0f, 3.0f));
    const auto wte = to_bf16(random_vector(s.padded_vocab_size * s.d_model, 12, -2.0f, 2.0f));
    std::vector<int32_t> tgt(static_cast<size_t>(s.n_tokens));
    for (int64_t i = 0; i < s.n_tokens; ++i) tgt[size_t(i)] = int32_t((i * 7919) % s.vocab_size);
    std::vector<char> ws(size_t(be->lm_head_workspace_bytes(s)));
    struct Out {
        float mean = 0.0f;
        std::vector<float> losses, dx;
        std::vector<bf16> dwte;
    };
    auto run = [&](int threads) {
        Out o;
        o.losses.resize(size_t(s.n_tokens));
        o.dx.resize(size_t(s.n_tokens * s.d_model));
        o.dwte.assign(size_t(s.padded_vocab_size * s.d_model), f32_to_bf16(0.25f));
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        be->lm_head_cross_entropy(&o.mean, o.losses.data(), o.dx.data(), o.dwte.data(), x.data(), wte.data(),
                                  tgt.data(), 0.5f, s, ws.data());
        omp_set_num_threads(saved);
        return o;
    };
    const Out one = run(1), three = run(3);
    REQUIRE(std::isfinite(one.mean));
    REQUIRE(std::memcmp(&one.mean, &three.mean, sizeof(float)) == 0);
    REQUIRE(std::memcmp(one.losses.data(), three.losses.data(), one.losses.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(one.dx.data(), three.dx.data(), one.dx.size() * sizeof(float)) == 0);
    REQUIRE(std::memcmp(one.dwte.data(), three.dwte.data(), one.dwte.size() * sizeof(bf16)) == 0);
    // and the gradients are not trivially equal: dx is nonzero, padding rows keep their 0.25
    double dx_sq = 0.0;
    for (float v : one.dx) dx_sq += double(v) * v;
    REQUIRE(dx_sq > 0.0);
    REQUIRE(bf16_to_f32(one.dwte[size_t(s.vocab_size * s.d_model)]) == 0.25f);
}
