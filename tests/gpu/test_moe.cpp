// GPU tests of the mixture-of-experts ops against the CPU backend: router forward (softmax, top-k,
// gates, counts, balance and z losses, with and without Philox noise) and backward; the stable
// dispatch (exact); gather and combine with their backwards; the grouped expert matmul with uneven
// routing and empty experts (an expert without tokens gets no gradient).
#include <numeric>

#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Logits with uneven routing: experts >= n_hot get a large negative bias, so they stay empty.
std::vector<float> router_logits(int64_t n, int64_t E, int64_t n_hot, uint32_t seed) {
    auto lg = random_normal(n * E, seed, 1.5f);
    for (int64_t t = 0; t < n; ++t)
        for (int64_t e = n_hot; e < E; ++e) lg[static_cast<size_t>(t * E + e)] -= 30.0f;
    return lg;
}

// Expert choices with uneven routing: expert e gets about weight e; experts in `empty` get none.
std::vector<int32_t> uneven_expert_idx(int64_t n, int64_t K, int64_t E, uint32_t seed) {
    std::mt19937 gen(seed);
    std::vector<int32_t> idx(static_cast<size_t>(n * K));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < K; ++j) {
            int32_t e;
            bool dup;
            do {
                const uint32_t r = gen() % uint32_t(E * E);
                e = int32_t(std::sqrt(double(r)));  // skewed toward high experts
                if (e % 5 == 2) e = (e + 1) % int32_t(E);  // experts 2, 7, 12, ... stay empty
                dup = false;
                for (int64_t i = 0; i < j; ++i) dup |= idx[static_cast<size_t>(t * K + i)] == e;
            } while (dup);
            idx[static_cast<size_t>(t * K + j)] = e;
        }
    }
    return idx;
}

}  // namespace

TEST_CASE("gpu router forward and backward match the CPU, with empty experts and noise, top-2 and top-1") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    for (int top_k : {2, 1})
    for (int noisy = 0; noisy < 2; ++noisy) {
        const RouterShape s{1000, 16, top_k};
        RouterOptions o;
        o.noise_std = noisy ? 0.5f : 0.0f;
        o.seed = 42;
        o.step = 7;
        o.tensor = 3;
        o.noise_offset = 12345;
        const int64_t n = s.n_tokens, E = s.n_experts, K = s.top_k;
        const auto logits = router_logits(n, E, 11, 1 + noisy);
        std::vector<float> probs(static_cast<size_t>(n * E)), gates(static_cast<size_t>(n * K)), mp(static_cast<size_t>(E)), bal(1), z(1);
        std::vector<int32_t> idx(static_cast<size_t>(n * K));
        std::vector<int64_t> counts(static_cast<size_t>(E));
        Dev<float> glog(logits), gprobs(probs.size()), ggates(gates.size()), gmp(mp.size()), gbal(1), gz(1);
        Dev<int32_t> gidx(idx.size());
        Dev<int64_t> gcounts(counts.size());
        cpu->moe_router_forward(probs.data(), idx.data(), gates.data(), counts.data(), bal.data(), z.data(), mp.data(),
                                logits.data(), s, o);
        gpu().moe_router_forward(gprobs.p, gidx.p, ggates.p, gcounts.p, gbal.p, gz.p, gmp.p, glog.p, s, o);
        INFO("top_k " << top_k << ", noise " << o.noise_std);
        require_close("router probs", gprobs.get(), probs, 1e-9);
        const auto gi = gidx.get();
        int64_t mismatched = 0;
        for (size_t i = 0; i < idx.size(); ++i) mismatched += gi[i] != idx[i];
        CHECK(mismatched == 0);
        CHECK(gcounts.get() == counts);
        require_close("router gates", ggates.get(), gates, 1e-9);
        require_close("router mean probs", gmp.get(), mp, 1e-9);
        require_close("router balance loss", gbal.get(), bal, 1e-10);
        require_close("router z loss", gz.get(), z, 1e-10);
        CHECK(counts[15] == 0);  // uneven routing: an empty expert

        // Backward from the CPU's saved forward on both sides.
        const auto dgates = random_vector(n * K, 9);
        std::vector<float> dl(static_cast<size_t>(n * E));
        Dev<float> gdg(dgates), gdl(dl.size()), cprobs(probs), cgates(gates);
        Dev<int32_t> cidx(idx);
        Dev<int64_t> ccounts(counts);
        cpu->moe_router_backward(dl.data(), dgates.data(), logits.data(), probs.data(), idx.data(), gates.data(),
                                 counts.data(), 0.5f, 0.5f, s, o);
        gpu().moe_router_backward(gdl.p, gdg.p, glog.p, cprobs.p, cidx.p, cgates.p, ccounts.p, 0.5f, 0.5f, s, o);
        require_close("router dlogits", gdl.get(), dl, 1e-8);
        cpu->moe_router_backward(dl.data(), nullptr, logits.data(), probs.data(), idx.data(), gates.data(),
                                 counts.data(), 1.0f, 0.0f, s, o);
        gpu().moe_router_backward(gdl.p, nullptr, glog.p, cprobs.p, cidx.p, cgates.p, ccounts.p, 1.0f, 0.0f, s, o);
        require_close("router dlogits (aux losses only)", gdl.get(), dl, 1e-8);
    }
}

TEST_CASE("gpu dispatch is the CPU's stable counting sort exactly, with uneven routing and empty experts") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    for (int64_t n : {1, 700, 3001}) {
        const int64_t K = 2, E = 24;
        const auto idx = uneven_expert_idx(n, K, E, uint32_t(n));
        std::vector<int64_t> s2c(static_cast<size_t>(n * K)), c2s(static_cast<size_t>(n * K)), off(static_cast<size_t>(E + 1));
        Dev<int32_t> gidx(idx);
        Dev<int64_t> gs2c(s2c.size()), gc2s(c2s.size()), goff(off.size());
        cpu->moe_dispatch(s2c.data(), c2s.data(), off.data(), idx.data(), n, K, E);
        gpu().moe_dispatch(gs2c.p, gc2s.p, goff.p, gidx.p, n, K, E);
        INFO("n_tokens " << n);
        CHECK(gs2c.get() == s2c);
        CHECK(gc2s.get() == c2s);
        CHECK(goff.get() == off);
    }
}

TEST_CASE("gpu dispatch reports an expert index out of range") {
    SKEW_REQUIRE_GPU();
    Dev<int32_t> gidx(std::vector<int32_t>{0, 1, 9, 2});
    Dev<int64_t> gs2c(4), gc2s(4), goff(5);
    gpu().moe_dispatch(gs2c.p, gc2s.p, goff.p, gidx.p, 2, 2, 4);
    CHECK_THROWS_AS(gpu().synchronize(), skew::Error);
}

TEST_CASE("gpu gather and combine forward and backward match the CPU (vector and scalar paths)") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    for (const int64_t C : {72, 36}) {  // C % 8 == 0 takes the 16-byte path
        INFO("channels " << C);
        const int64_t n = 333, K = 2, E = 12;
        const auto idx = uneven_expert_idx(n, K, E, 5);
        std::vector<int64_t> s2c(static_cast<size_t>(n * K)), c2s(static_cast<size_t>(n * K)), off(static_cast<size_t>(E + 1));
        cpu->moe_dispatch(s2c.data(), c2s.data(), off.data(), idx.data(), n, K, E);
        Dev<int64_t> gs2c(s2c), gc2s(c2s);
        const auto x = random_bf16(n * C, 1), ys = random_bf16(n * K * C, 2), dout = random_bf16(n * C, 3);
        const auto dxs = random_bf16(n * K * C, 4);
        const auto gates = random_vector(n * K, 5, 0.0f, 1.0f);
        Dev<bf16> gx(x), gys(ys), gdout(dout), gdxs(dxs);
        Dev<float> ggates(gates);

        std::vector<bf16> xs(static_cast<size_t>(n * K * C));
        Dev<bf16> gxs(xs.size());
        cpu->moe_gather_forward(xs.data(), x.data(), s2c.data(), n, K, C);
        gpu().moe_gather_forward(gxs.p, gx.p, gs2c.p, n, K, C);
        require_close("gather forward", gxs.get(), xs, 1e-12);

        for (int acc = 0; acc < 2; ++acc) {
            std::vector<bf16> dx = random_bf16(n * C, 6);
            Dev<bf16> gdx(dx);
            cpu->moe_gather_backward(dx.data(), dxs.data(), c2s.data(), n, K, C, acc);
            gpu().moe_gather_backward(gdx.p, gdxs.p, gc2s.p, n, K, C, acc);
            require_close("gather backward", gdx.get(), dx, 1e-12);
    }

    std::vector<bf16> out(static_cast<size_t>(n * C));
    Dev<bf16> gout(out.size());
    cpu->moe_combine_forward(out.data(), ys.data(), gates.data(), c2s.data(), n, K, C);
    gpu().moe_combine_forward(gout.p, gys.p, ggates.p, gc2s.p, n, K, C);
    require_close("combine forward", gout.get(), out, 1e-6);

    std::vector<bf16> dys(static_cast<size_t>(n * K * C));
    std::vector<float> dg(static_cast<size_t>(n * K));
    Dev<bf16> gdys(dys.size());
    Dev<float> gdg(dg.size());
    cpu->moe_combine_backward(dys.data(), dg.data(), dout.data(), ys.data(), gates.data(), c2s.data(), n, K, C);
    gpu().moe_combine_backward(gdys.p, gdg.p, gdout.p, gys.p, ggates.p, gc2s.p, n, K, C);
    require_close("combine backward dys", gdys.get(), dys, 1e-12);
    require_close("combine backward dgates", gdg.get(), dg, 1e-9);
    }
}

TEST_CASE("gpu grouped expert matmul matches the CPU, empty experts get no gradient") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 500, K = 2, E = 10, IN = 64, OUT = 96;
    const auto idx = uneven_expert_idx(n, K, E, 8);
    std::vector<int64_t> s2c(static_cast<size_t>(n * K)), c2s(static_cast<size_t>(n * K)), off(static_cast<size_t>(E + 1));
    cpu->moe_dispatch(s2c.data(), c2s.data(), off.data(), idx.data(), n, K, E);
    REQUIRE(off[3] == off[2]);  // expert 2 is empty
    const int64_t rows = n * K;
    Dev<int64_t> goff(off);
    const auto inp = random_bf16(rows * IN, 1), w = random_bf16(E * OUT * IN, 2), dout = random_bf16(rows * OUT, 3);
    Dev<bf16> ginp(inp), gw(w), gdout(dout);

    std::vector<bf16> out(static_cast<size_t>(rows * OUT));
    Dev<bf16> gout(out.size());
    cpu->moe_matmul_forward(out.data(), inp.data(), w.data(), off.data(), E, IN, OUT);
    gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
    // bf16 outputs of fp32 sums in different orders: one rounding apart where they straddle a
    // boundary (NMSE <= share * 2^-14; 1e-5 would be every element rounding independently)
    require_close("moe_matmul forward", gout.get(), out, 1e-6);

    for (int acc = 0; acc < 2; ++acc) {
        std::vector<bf16> dinp = random_bf16(rows * IN, 4);
        std::vector<float> dw(static_cast<size_t>(E * OUT * IN), 0.0f);
        Dev<bf16> gdinp(dinp);
        Dev<float> gdw(dw);
        cpu->moe_matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), off.data(), E, IN, OUT, acc);
        gpu().moe_matmul_backward(gdinp.p, gdw.p, gdout.p, ginp.p, gw.p, goff.p, E, IN, OUT, acc);
        require_close("moe_matmul dinp", gdinp.get(), dinp, 1e-6);
        const auto gdw_h = gdw.get();
        require_close("moe_matmul dweight fp32", gdw_h, dw, 1e-9);
        bool empty_zero = true;
        for (int64_t i = 2 * OUT * IN; i < 3 * OUT * IN; ++i) empty_zero &= gdw_h[static_cast<size_t>(i)] == 0.0f;
        CHECK(empty_zero);
    }
    std::vector<bf16> dwb = random_bf16(E * OUT * IN, 5);
    Dev<bf16> gdwb(dwb);
    cpu->moe_matmul_backward(nullptr, dwb.data(), dout.data(), inp.data(), w.data(), off.data(), E, IN, OUT, false);
    gpu().moe_matmul_backward(nullptr, gdwb.p, gdout.p, ginp.p, gw.p, goff.p, E, IN, OUT, false);
    require_close("moe_matmul dweight bf16", gdwb.get(), dwb, 1e-6);
}
