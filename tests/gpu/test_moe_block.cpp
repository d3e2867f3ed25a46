// GPU test of the ops composed as one MoE feed-forward does (docs/design.md: router -> top-2 -> dispatch
// -> expert SwiGLU -> combine), forward and backward, against the same chain on the CPU backend,
// with uneven routing and an empty expert. Device offsets feed the grouped matmul directly, as in
// the model. Tolerance: normalized MSE <= 1e-4 on outputs and gradients (several bf16 roundings).
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Every tensor of the chain, host or device pointers (one set per backend).
struct MoeTensors {
    bf16 *x, *xs, *h1, *h2, *act, *ys, *out;       // activations
    float *wr, *logits, *probs, *gates, *scalars;  // router
    int32_t* idx;
    int64_t *counts, *s2c, *c2s, *off;
    bf16 *w1, *w2, *w3;                              // experts (E, H, C), (E, H, C), (E, C, H)
    bf16 *dout, *dys, *dact, *dh1, *dh2, *dxs, *dx;  // gradients
    float *dgates, *dlogits, *dwr, *dw1, *dw2, *dw3;
};

void run_chain(Backend& be, const MoeTensors& t, int64_t n, int64_t C, int64_t H, int64_t E, int64_t K,
               const RouterOptions& o) {
    const RouterShape rs{n, E, K};
    const int64_t nk = n * K;
    be.matmul_forward(t.logits, t.x, t.wr, n, C, E);  // fp32 logits = x (bf16) · Wr (fp32)^T
    be.moe_router_forward(t.probs, t.idx, t.gates, t.counts, t.scalars, t.scalars + 1, nullptr, t.logits, rs, o);
    be.moe_dispatch(t.s2c, t.c2s, t.off, t.idx, n, K, E);
    be.moe_gather_forward(t.xs, t.x, t.s2c, n, K, C);
    be.moe_matmul_forward(t.h1, t.xs, t.w1, t.off, E, C, H);
    be.moe_matmul_forward(t.h2, t.xs, t.w2, t.off, E, C, H);
    be.swiglu_forward(t.act, t.h1, t.h2, nk * H);
    be.moe_matmul_forward(t.ys, t.act, t.w3, t.off, E, H, C);
    be.moe_combine_forward(t.out, t.ys, t.gates, t.c2s, n, K, C);
    // backward
    be.moe_combine_backward(t.dys, t.dgates, t.dout, t.ys, t.gates, t.c2s, n, K, C);
    be.moe_matmul_backward(t.dact, t.dw3, t.dys, t.act, t.w3, t.off, E, H, C, false);
    be.swiglu_backward(t.dh1, t.dh2, t.dact, t.h1, t.h2, nk * H);
    be.moe_matmul_backward(t.dxs, t.dw1, t.dh1, t.xs, t.w1, t.off, E, C, H, false);
    be.moe_matmul_backward(t.dxs, t.dw2, t.dh2, t.xs, t.w2, t.off, E, C, H, true);
    be.moe_gather_backward(t.dx, t.dxs, t.c2s, n, K, C, false);
    be.moe_router_backward(t.dlogits, t.dgates, t.logits, t.probs, t.idx, t.gates, t.counts, 1.0f, 1.0f, rs, o);
    be.matmul_backward(t.dx, t.dwr, t.dlogits, t.x, t.wr, n, C, E, true);  // router's dx added to the experts'
}

}  // namespace

TEST_CASE("gpu MoE feed-forward chain, forward and backward, matches the CPU with an empty expert") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 300, C = 64, H = 48, E = 8, K = 2, nk = n * K;
    RouterOptions o;
    o.noise_std = 0.5f;
    o.seed = 7;
    o.step = 3;
    // Inputs: x >= 0 and expert 5's router row all -4, so its logit is far below the others and
    // it receives no tokens (an empty expert), noise included.
    auto x = random_bf16(n * C, 1);
    for (auto& v : x) v = f32_to_bf16(std::fabs(bf16_to_f32(v)));
    auto wr = random_normal(E * C, 2, 0.3f);
    for (int64_t c = 0; c < C; ++c) wr[static_cast<size_t>(5 * C + c)] = -4.0f;
    auto w1 = to_bf16(random_normal(E * H * C, 3, 0.15f)), w2 = to_bf16(random_normal(E * H * C, 4, 0.15f));
    auto w3 = to_bf16(random_normal(E * C * H, 5, 0.15f));
    auto dout = random_bf16(n * C, 6);

    // Host buffers for the CPU chain.
    std::vector<bf16> xs(static_cast<size_t>(nk * C)), h1(static_cast<size_t>(nk * H)), h2(h1.size()), act(h1.size());
    std::vector<bf16> ys(xs.size()), out(static_cast<size_t>(n * C)), dys(xs.size()), dact(h1.size()), dh1(h1.size());
    std::vector<bf16> dh2(h1.size()), dxs(xs.size()), dx(out.size());
    std::vector<float> logits(static_cast<size_t>(n * E)), probs(logits.size()), gates(static_cast<size_t>(nk));
    std::vector<float> scalars(2), dgates(gates.size()), dlogits(logits.size()), dwr(wr.size(), 0.0f);
    std::vector<float> dw1(w1.size(), 0.0f), dw2(w2.size(), 0.0f), dw3(w3.size(), 0.0f);
    std::vector<int32_t> idx(static_cast<size_t>(nk));
    std::vector<int64_t> counts(static_cast<size_t>(E)), s2c(static_cast<size_t>(nk)), c2s(s2c.size()),
        off(static_cast<size_t>(E + 1));
    const MoeTensors ct{x.data(),   xs.data(),     h1.data(),     h2.data(),     act.data(),     ys.data(),
                        out.data(), wr.data(),     logits.data(), probs.data(),  gates.data(),   scalars.data(),
                        idx.data(), counts.data(), s2c.data(),    c2s.data(),    off.data(),     w1.data(),
                        w2.data(),  w3.data(),     dout.data(),   dys.data(),    dact.data(),    dh1.data(),
                        dh2.data(), dxs.data(),    dx.data(),     dgates.data(), dlogits.data(), dwr.data(),
                        dw1.data(), dw2.data(),    dw3.data()};
    run_chain(*cpu, ct, n, C, H, E, K, o);
    REQUIRE(counts[5] == 0);

    // Device buffers for the GPU chain.
    Dev<bf16> gx(x), gxs(xs.size()), gh1(h1.size()), gh2(h1.size()), gact(h1.size()), gys(xs.size()), gout(out.size());
    Dev<bf16> gdys(xs.size()), gdact(h1.size()), gdh1(h1.size()), gdh2(h1.size()), gdxs(xs.size()), gdx(out.size());
    Dev<bf16> gw1(w1), gw2(w2), gw3(w3), gdout(dout);
    Dev<float> gwr(wr), glogits(logits.size()), gprobs(logits.size()), ggates(gates.size()), gscalars(2);
    Dev<float> gdgates(gates.size()), gdlogits(logits.size()), gdwr(wr.size()), gdw1(w1.size()), gdw2(w2.size()),
        gdw3(w3.size());
    Dev<int32_t> gidx(idx.size());
    Dev<int64_t> gcounts(counts.size()), gs2c(s2c.size()), gc2s(s2c.size()), goff(off.size());
    const MoeTensors gt{gx.p,      gxs.p,      gh1.p,      gh2.p,  gact.p,    gys.p,  gout.p, gwr.p,  glogits.p,
                        gprobs.p,  ggates.p,   gscalars.p, gidx.p, gcounts.p, gs2c.p, gc2s.p, goff.p, gw1.p,
                        gw2.p,     gw3.p,      gdout.p,    gdys.p, gdact.p,   gdh1.p, gdh2.p, gdxs.p, gdx.p,
                        gdgates.p, gdlogits.p, gdwr.p,     gdw1.p, gdw2.p,    gdw3.p};
    run_chain(gpu(), gt, n, C, H, E, K, o);

    CHECK(gidx.get() == idx);
    CHECK(gcounts.get() == counts);
    CHECK(goff.get() == off);
    // A chain of four bf16 roundings (h1, h2, act, out; the same in the backward): where one lands
    // differently (one ulp, relative <= 2^-7) the difference carries on, so the NMSE is the share of
    // such elements times ~2^-14 per rounding; 1e-5 allows ~15% of elements to differ at one step.
    constexpr double CHAIN = 1e-5;
    require_close("moe out", gout.get(), out, CHAIN);
    require_close("moe balance and z losses", gscalars.get(), scalars, 1e-8);
    require_close("moe dx", gdx.get(), dx, CHAIN);
    require_close("moe dWr", gdwr.get(), dwr, CHAIN);
    require_close("moe dw1", gdw1.get(), dw1, CHAIN);
    require_close("moe dw2", gdw2.get(), dw2, CHAIN);
    require_close("moe dw3", gdw3.get(), dw3, CHAIN);
    const auto gdw1_h = gdw1.get();
    bool empty_zero = true;
    for (int64_t i = 5 * H * C; i < 6 * H * C; ++i) empty_zero &= gdw1_h[static_cast<size_t>(i)] == 0.0f;
    CHECK(empty_zero);
}
