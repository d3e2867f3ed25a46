// Tests of the fp32 MoE router (kernels/cpu/moe_router.cpp; docs/design.md "Router (fp32)"): top-2
// distinct with ties to the lower index, deterministic routing of all-equal logits, the balance loss
// at its floor α under uniform routing, Philox noise, finite z-loss for logits in the hundreds, and
// the gradient to the logits (gates, balance and z-loss together) against finite differences.
#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Everything the router forward writes, for one call.
struct RouterOut {
    std::vector<float> probs, gates, mean_probs;
    std::vector<int32_t> idx;
    std::vector<int64_t> counts;
    float balance = 0.0f, z = 0.0f;
};

RouterOut route(const std::vector<float>& logits, const RouterShape& s, const RouterOptions& o) {
    RouterOut r;
    r.probs.resize(size_t(s.n_tokens * s.n_experts));
    r.gates.resize(size_t(s.n_tokens * s.top_k));
    r.idx.resize(size_t(s.n_tokens * s.top_k));
    r.counts.resize(static_cast<size_t>(s.n_experts));
    r.mean_probs.resize(static_cast<size_t>(s.n_experts));
    make_cpu_backend()->moe_router_forward(r.probs.data(), r.idx.data(), r.gates.data(), r.counts.data(), &r.balance,
                                           &r.z, r.mean_probs.data(), logits.data(), s, o);
    return r;
}

}  // namespace

TEST_CASE("top-2 routes every token to two distinct experts in descending probability") {
    const RouterShape s{64, 8, 2};
    RouterOptions o;
    // coarse logits make many exact ties
    auto logits = random_vector(s.n_tokens * s.n_experts, 1, -2.0f, 2.0f);
    for (auto& x : logits) x = std::round(x);
    const auto r = route(logits, s, o);
    int64_t total = 0;
    for (int64_t e = 0; e < s.n_experts; ++e) total += r.counts[size_t(e)];
    REQUIRE(total == s.n_tokens * s.top_k);
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        const int32_t a = r.idx[size_t(2 * t)], b = r.idx[size_t(2 * t + 1)];
        REQUIRE(a != b);
        const float* p = r.probs.data() + t * s.n_experts;
        // a is the first maximum; b the first maximum among the rest
        for (int64_t e = 0; e < s.n_experts; ++e) {
            REQUIRE(p[e] <= p[a]);
            if (e < a) REQUIRE(p[e] < p[a]);
            if (e != a) REQUIRE(p[e] <= p[b]);
            if (e != a && e < b) REQUIRE(p[e] < p[b]);
        }
        REQUIRE(r.gates[size_t(2 * t)] + r.gates[size_t(2 * t + 1)] == Approx(1.0f).epsilon(1e-6));
        REQUIRE(r.gates[size_t(2 * t)] >= r.gates[size_t(2 * t + 1)]);
    }
}

TEST_CASE("all-equal router logits route every token to experts 0 and 1 with equal gates") {
    const RouterShape s{10, 8, 2};
    const std::vector<float> logits(size_t(s.n_tokens * s.n_experts), 0.0f);  // the zero-initialized router
    const auto r = route(logits, s, RouterOptions{});
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        REQUIRE(r.idx[size_t(2 * t)] == 0);
        REQUIRE(r.idx[size_t(2 * t + 1)] == 1);
        REQUIRE(r.gates[size_t(2 * t)] == 0.5f);
        REQUIRE(r.gates[size_t(2 * t + 1)] == 0.5f);
    }
    REQUIRE(r.counts[0] == s.n_tokens);
    REQUIRE(r.counts[1] == s.n_tokens);
    for (int64_t e = 2; e < s.n_experts; ++e) REQUIRE(r.counts[size_t(e)] == 0);
}

TEST_CASE("balance loss equals alpha under uniform routing") {
    RouterOptions o;
    o.balance_alpha = 0.05f;
    SECTION("uniform probabilities (all-equal logits): p̄ = 1/E, whatever f") {
        const RouterShape s{16, 8, 2};
        const auto r = route(std::vector<float>(size_t(s.n_tokens * s.n_experts), 0.0f), s, o);
        REQUIRE(r.balance == o.balance_alpha);  // exact: 1/8 and the f_i are dyadic
    }
    SECTION("uniform load and uniform mean probability from cyclically shifted logits") {
        const RouterShape s{4, 4, 2};
        const float row[4] = {3.0f, 1.0f, 0.0f, -1.0f};
        std::vector<float> logits(16);
        for (int t = 0; t < 4; ++t)
            for (int e = 0; e < 4; ++e) logits[size_t(t * 4 + e)] = row[(e - t + 4) % 4];
        const auto r = route(logits, s, o);
        for (int e = 0; e < 4; ++e) REQUIRE(r.counts[size_t(e)] == 2);
        REQUIRE(r.balance == Approx(o.balance_alpha).epsilon(1e-6));  // p̄_i = Σ_t p / 4, summed in fp32
    }
    SECTION("imbalanced routing lies above the floor") {
        const RouterShape s{8, 4, 2};
        auto logits = random_vector(s.n_tokens * s.n_experts, 2);
        for (int64_t t = 0; t < s.n_tokens; ++t) logits[size_t(t * 4)] += 3.0f;  // everyone prefers expert 0
        REQUIRE(route(logits, s, o).balance > 1.5f * o.balance_alpha);
    }
}

TEST_CASE("router noise is Philox N(0, sigma^2) keyed by seed, step, tensor and element") {
    const RouterShape s{6, 4, 2};
    const std::vector<float> logits(size_t(s.n_tokens * s.n_experts), 0.0f);
    RouterOptions o;
    o.noise_std = 0.5f;
    o.seed = 42;
    o.step = 7;
    o.tensor = 3;
    o.noise_offset = 100;
    const auto r = route(logits, s, o);
    const PhiloxKey key{42, PHILOX_STREAM_ROUTER_NOISE};
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        double noisy[4], mx = -1e30, sum = 0.0;
        for (int e = 0; e < 4; ++e) {
            noisy[e] = 0.5 * philox_normal(key, 7, 3, uint64_t(100 + t * 4 + e));
            mx = std::max(mx, noisy[e]);
        }
        for (double x : noisy) sum += std::exp(x - mx);
        for (int e = 0; e < 4; ++e)
            REQUIRE(r.probs[size_t(t * 4 + e)] == Approx(std::exp(noisy[e] - mx) / sum).epsilon(1e-5));
    }
    // the z-loss reads the clean logits: lse = log 4 for every token
    REQUIRE(r.z == Approx(o.z_coef * std::log(4.0) * std::log(4.0)).epsilon(1e-6));
    // a different step draws different noise; the same arguments draw the same
    RouterOptions o2 = o;
    o2.step = 8;
    REQUIRE(route(logits, s, o2).probs != r.probs);
    REQUIRE(route(logits, s, o).probs == r.probs);
}

TEST_CASE("z-loss stays finite for router logits in the hundreds") {
    const RouterShape s{4, 8, 2};
    auto logits = random_vector(s.n_tokens * s.n_experts, 3, 300.0f, 900.0f);
    RouterOptions o;
    const auto r = route(logits, s, o);
    REQUIRE(std::isfinite(r.z));
    REQUIRE(std::isfinite(r.balance));
    double ref = 0.0;
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        double mx = -1e30, sum = 0.0;
        for (int64_t e = 0; e < s.n_experts; ++e) mx = std::max(mx, double(logits[size_t(t * 8 + e)]));
        for (int64_t e = 0; e < s.n_experts; ++e) sum += std::exp(logits[size_t(t * 8 + e)] - mx);
        ref += std::pow(mx + std::log(sum), 2.0);
    }
    REQUIRE(r.z == Approx(o.z_coef * ref / double(s.n_tokens)).epsilon(1e-6));
    std::vector<float> dl(logits.size());
    const std::vector<float> dg(size_t(s.n_tokens * 2), 1.0f);
    make_cpu_backend()->moe_router_backward(dl.data(), dg.data(), logits.data(), r.probs.data(), r.idx.data(),
                                            r.gates.data(), r.counts.data(), 1.0f, 1.0f, s, o);
    for (float x : dl) REQUIRE(std::isfinite(x));
}

TEST_CASE("router gradient to the logits matches finite differences, top-2 and top-1") {
  for (int64_t top_k : {2, 1}) {
    const RouterShape s{6, 5, top_k};
    RouterOptions o;
    o.balance_alpha = 0.5f;  // large weights so every term shows in the check
    o.z_coef = 0.1f;
    const float w_bal = 0.7f, w_z = 1.3f;
    const auto rg = random_vector(s.n_tokens * s.top_k, 4);  // loss = Σ gates·rg + w_bal·balance + w_z·z
    for (float noise : {0.0f, 0.5f}) {
        o.noise_std = noise;
        o.seed = 9;
        auto logits = random_normal(s.n_tokens * s.n_experts, 5);
        auto loss = [&] {
            const auto r = route(logits, s, o);
            return dot(r.gates, rg) + double(w_bal) * r.balance + double(w_z) * r.z;
        };
        const auto r = route(logits, s, o);
        std::vector<float> dl(logits.size());
        make_cpu_backend()->moe_router_backward(dl.data(), rg.data(), logits.data(), r.probs.data(), r.idx.data(),
                                                r.gates.data(), r.counts.data(), w_bal, w_z, s, o);
        // top-k choice and f are piecewise constant: eps 1e-3 does not flip them for these logits.
        // fp32 forward: rounding noise ~1e-4 absolute
        INFO("top_k " << top_k << ", noise_std " << noise);
        check_gradient("dlogits", dl, fd_gradient(logits, loss, 1e-3f), 3e-4, 1e-2);
    }
  }
}

TEST_CASE("a top-1 gate is the router probability, so the router gets a gradient from the gate") {
    const RouterShape s{4, 3, 1};
    const std::vector<float> logits = {0.1f, 0.5f, -0.2f, 1.0f, 0.0f, 0.3f, -1.0f, -0.5f, 0.7f, 0.2f, 0.2f, 0.9f};
    const RouterOut r = route(logits, s, RouterOptions{});
    for (int64_t t = 0; t < s.n_tokens; ++t) {
        CHECK(r.gates[size_t(t)] == r.probs[size_t(t * s.n_experts + r.idx[size_t(t)])]);
        CHECK(r.gates[size_t(t)] < 1.0f);
    }
    // Gradient from the gates alone (no aux losses): non-zero (renormalized it would be exactly 0).
    std::vector<float> dl(logits.size()), dg(size_t(s.n_tokens), 1.0f);
    make_cpu_backend()->moe_router_backward(dl.data(), dg.data(), logits.data(), r.probs.data(), r.idx.data(),
                                            r.gates.data(), r.counts.data(), 0.0f, 0.0f, s, RouterOptions{});
    double norm = 0;
    for (float v : dl) norm += double(v) * v;
    CHECK(norm > 1e-3);
}

TEST_CASE("router rejects top_k larger than the number of experts") {
    const RouterShape s{2, 2, 3};
    REQUIRE_THROWS_AS(route(std::vector<float>(4, 0.0f), s, RouterOptions{}), Error);
}
