// The ops composed into one MoE feed-forward layer as the model will run it (docs/design.md, "The data
// path": router -> top-2 -> dispatch -> expert SwiGLU -> combine, plus balance and z-loss): the
// gradient of the input, the router and all three expert banks against finite differences, with
// router noise off and on. Catches a misuse of the interface's conventions, not just one op's error.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Shapes: n tokens of width C, E experts of hidden size F, top-k.
constexpr int64_t n = 6, C = 4, E = 4, F = 3, K = 2;

struct MoeParams {
    std::vector<float> x, wr, w1, w2, w3;  // (n, C), (E, C), (E, F, C), (E, F, C), (E, C, F)
};

struct MoeForward {
    std::vector<float> logits, probs, gates, xs, a, b, h, ys, y;
    std::vector<int32_t> idx;
    std::vector<int64_t> counts, s2c, c2s, offsets;
    float balance = 0.0f, z = 0.0f;
};

MoeForward moe_forward(const MoeParams& p, const RouterOptions& o) {
    MoeForward f;
    auto sz = [](int64_t v) { return static_cast<size_t>(v); };
    f.logits.resize(sz(n * E));
    f.probs.resize(sz(n * E));
    f.gates.resize(sz(n * K));
    f.idx.resize(sz(n * K));
    f.counts.resize(sz(E));
    f.s2c.resize(sz(n * K));
    f.c2s.resize(sz(n * K));
    f.offsets.resize(sz(E + 1));
    f.xs.resize(sz(n * K * C));
    f.a.resize(sz(n * K * F));
    f.b.resize(sz(n * K * F));
    f.h.resize(sz(n * K * F));
    f.ys.resize(sz(n * K * C));
    f.y.resize(sz(n * C));
    cpu::matmul(f.logits.data(), p.x.data(), p.wr.data(), MatmulShape{n, E, C, false, true});
    cpu::moe_router_forward(f.probs.data(), f.idx.data(), f.gates.data(), f.counts.data(), &f.balance, &f.z, nullptr,
                            f.logits.data(), RouterShape{n, E, K}, o);
    cpu::moe_dispatch(f.s2c.data(), f.c2s.data(), f.offsets.data(), f.idx.data(), n, K, E);
    cpu::moe_gather_forward(f.xs.data(), p.x.data(), f.s2c.data(), n, K, C);
    cpu::moe_matmul_forward(f.a.data(), f.xs.data(), p.w1.data(), f.offsets.data(), E, C, F);
    cpu::moe_matmul_forward(f.b.data(), f.xs.data(), p.w2.data(), f.offsets.data(), E, C, F);
    cpu::swiglu_forward(f.h.data(), f.a.data(), f.b.data(), n * K * F);
    cpu::moe_matmul_forward(f.ys.data(), f.h.data(), p.w3.data(), f.offsets.data(), E, F, C);
    cpu::moe_combine_forward(f.y.data(), f.ys.data(), f.gates.data(), f.c2s.data(), n, K, C);
    return f;
}

}  // namespace

TEST_CASE("MoE layer gradients through router, experts and combine match finite differences") {
    MoeParams p{random_vector(n * C, 1), random_vector(E * C, 2), random_vector(E * F * C, 3),
                random_vector(E * F * C, 4), random_vector(E * C * F, 5)};
    const auto r = random_vector(n * C, 6);  // loss = Σ y·r + w_bal·balance + w_z·z
    const float w_bal = 0.5f, w_z = 2.0f;
    for (float noise : {0.0f, 0.5f}) {
        RouterOptions o;
        o.noise_std = noise;
        o.seed = 3;
        o.balance_alpha = 0.3f;
        o.z_coef = 0.05f;
        auto loss = [&] {
            const auto f = moe_forward(p, o);
            return dot(f.y, r) + double(w_bal) * f.balance + double(w_z) * f.z;
        };
        const auto f = moe_forward(p, o);
        auto sz = [](int64_t v) { return static_cast<size_t>(v); };
        std::vector<float> dys(sz(n * K * C)), dgates(sz(n * K)), dh(sz(n * K * F)), da(dh.size()), db(dh.size());
        std::vector<float> dxs(sz(n * K * C)), dx(sz(n * C)), dlogits(sz(n * E));
        std::vector<float> dw1(p.w1.size(), 0.0f), dw2(p.w2.size(), 0.0f), dw3(p.w3.size(), 0.0f),
            dwr(p.wr.size(), 0.0f);
        cpu::moe_combine_backward(dys.data(), dgates.data(), r.data(), f.ys.data(), f.gates.data(), f.c2s.data(), n, K,
                                  C);
        cpu::moe_matmul_backward(dh.data(), dw3.data(), dys.data(), f.h.data(), p.w3.data(), f.offsets.data(), E, F, C,
                                 false);
        cpu::swiglu_backward(da.data(), db.data(), dh.data(), f.a.data(), f.b.data(), n * K * F);
        cpu::moe_matmul_backward(dxs.data(), dw1.data(), da.data(), f.xs.data(), p.w1.data(), f.offsets.data(), E, C, F,
                                 false);
        cpu::moe_matmul_backward(dxs.data(), dw2.data(), db.data(), f.xs.data(), p.w2.data(), f.offsets.data(), E, C, F,
                                 true);
        cpu::moe_gather_backward(dx.data(), dxs.data(), f.c2s.data(), n, K, C, false);
        cpu::moe_router_backward(dlogits.data(), dgates.data(), f.logits.data(), f.probs.data(), f.idx.data(),
                                 f.gates.data(), f.counts.data(), w_bal, w_z, RouterShape{n, E, K}, o);
        // router linear layer: dx += dlogits · Wr, dWr += dlogits^T · x
        cpu::matmul(dx.data(), dlogits.data(), p.wr.data(), MatmulShape{n, C, E, false, false, 1.0f, 1.0f});
        cpu::matmul(dwr.data(), dlogits.data(), p.x.data(), MatmulShape{E, C, n, true, false, 1.0f, 1.0f});

        // fp32 forward, eps 1e-3 (no top-k flips for these inputs): rounding noise ~1e-4 absolute
        INFO("noise_std " << noise);
        check_gradient("dx", dx, fd_gradient(p.x, loss, 1e-3f), 5e-4, 1e-2);
        check_gradient("drouter", dwr, fd_gradient(p.wr, loss, 1e-3f), 5e-4, 1e-2);
        check_gradient("dw1", dw1, fd_gradient(p.w1, loss, 1e-3f), 5e-4, 1e-2);
        check_gradient("dw2", dw2, fd_gradient(p.w2, loss, 1e-3f), 5e-4, 1e-2);
        check_gradient("dw3", dw3, fd_gradient(p.w3, loss, 1e-3f), 5e-4, 1e-2);
    }
}
