// Op-table rows of the MoE ops (tests/backend_ops/op_table.h): router forward/backward (noise off
// and on, ties, top-1), dispatch, gather, the grouped expert matmul and combine, forward and backward,
// with spread, overfull and empty experts and T = 1; finite differences on the CPU's fp32 path.
#include <cmath>
#include <memory>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/reference.h"

namespace skew::ops {

namespace {

// ---- routing of the test cases: k distinct experts per token

// SKEWED: every token to experts 0..k-1 (overfull 0, the rest empty); SHIFTED: to experts 1..k (the
// first and, when E > k + 1, the last empty)
enum class Routing { SPREAD, SKEWED, SHIFTED };

std::vector<double> routing(int64_t n, int64_t k, int64_t E, Routing r, uint32_t seed) {
    std::vector<double> idx(static_cast<size_t>(n * k));
    uint32_t x = seed;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < k; ++j) {
            int64_t e = r == Routing::SHIFTED ? j + 1 : j;
            if (r == Routing::SPREAD) {
                bool dup = true;
                while (dup) {
                    x = x * 1664525u + 1013904223u;
                    e = int64_t((x >> 8) % uint32_t(E));
                    dup = false;
                    for (int64_t i = 0; i < j; ++i) dup = dup || int64_t(idx[size_t(t * k + i)]) == e;
                }
            }
            idx[size_t(t * k + j)] = double(e);
        }
    return idx;
}

const char* routing_name(Routing r) {
    return r == Routing::SPREAD   ? "spread"
           : r == Routing::SKEWED ? "skewed (overfull 0, empty rest)"
                                  : "shifted (0 and last empty)";
}

struct Dispatch {
    std::vector<double> idx, s2c, c2s, offsets;
};

Dispatch dispatch_of(int64_t n, int64_t k, int64_t E, Routing r, uint32_t seed) {
    Dispatch d;
    d.idx = routing(n, k, E, r, seed);
    ref::moe_dispatch(d.s2c, d.c2s, d.offsets, d.idx, E);
    return d;
}

// ---- router

RouterOptions router_options(float noise, uint64_t seed = 77, uint32_t step = 3, uint32_t tensor = 2,
                             uint64_t offset = 1000) {
    RouterOptions o;
    o.noise_std = noise;
    o.seed = seed;
    o.step = step;
    o.tensor = tensor;
    o.noise_offset = offset;
    return o;
}

// The noisy logits by the interface's definition: logit + noise_std·N(0,1) from Philox, in fp32.
std::vector<double> noisy_logits(const std::vector<double>& logits, const RouterShape& s, const RouterOptions& o) {
    std::vector<double> noisy = logits;
    if (o.noise_std != 0.0f)
        for (int64_t i = 0; i < s.n_tokens * s.n_experts; ++i)
            noisy[size_t(i)] = double(float(logits[size_t(i)]) +
                                      o.noise_std * philox_normal(PhiloxKey{o.seed, PHILOX_STREAM_ROUTER_NOISE}, o.step,
                                                                  o.tensor, o.noise_offset + uint64_t(i)));
    return noisy;
}

Case router_fwd_case(const RouterShape& s, Tensor logits, const RouterOptions& o, std::string note) {
    Case c;
    c.op = "moe_router_forward";
    c.shape = label("n%lld E%lld k%lld noise %g", (long long)s.n_tokens, (long long)s.n_experts, (long long)s.top_k,
                    o.noise_std) +
              note;
    c.dtypes = "f32";
    const int64_t n = s.n_tokens, E = s.n_experts, k = s.top_k;
    const Tol exact{};
    c.t = {std::move(logits),
           output("probs", DT::F32, n * E, tol_rounded(DT::F32, E)),
           output("expert_idx", DT::I32, n * k, exact),
           output("gates", DT::F32, n * k, tol_rounded(DT::F32, E)),
           output("counts", DT::I64, E, exact),
           output("balance_loss", DT::F32, 1, tol_rounded(DT::F32, n * E)),
           output("z_loss", DT::F32, 1, tol_rounded(DT::F32, n * E)),
           output("mean_probs", DT::F32, E, tol_rounded(DT::F32, n))};
    c.run = [s, o](Backend& be, Bufs& b) {
        be.moe_router_forward(b.at<float>(1), b.at<int32_t>(2), b.at<float>(3), b.at<int64_t>(4), b.at<float>(5),
                              b.at<float>(6), b.at<float>(7), b.at<float>(0), s, o);
    };
    c.ref = [s, o](std::vector<Tensor>& t) {
        const auto r = ref::moe_router_forward(noisy_logits(t[0].v, s, o), t[0].v, s, o.balance_alpha, o.z_coef,
                                               o.normalize_top_k);
        t[1].v = r.probs, t[2].v = r.expert_idx, t[3].v = r.gates, t[4].v = r.counts;
        t[5].v = {r.balance}, t[6].v = {r.z}, t[7].v = r.mean_probs;
    };
    c.flops = 12.0 * double(n * E) + double(n * E * k);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case router_fwd_case(int64_t n, int64_t E, int64_t k, float noise, bool ties, uint32_t seed) {
    const RouterShape s{n, E, k};
    return router_fwd_case(s,
                           ties ? input_values("logits", DT::F32, std::vector<double>(size_t(n * E), 0.0))
                                : input("logits", DT::F32, n * E, seed, -3, 3),
                           router_options(noise),
                           ties ? " all logits 0 (ties to the lower index; balance = alpha)" : "");
}

Case router_bwd_case(const RouterShape& s, Tensor logits, const RouterOptions& o, bool with_dgates, uint32_t seed,
                     std::string note) {
    Case c;
    c.op = "moe_router_backward";
    const int64_t n = s.n_tokens, E = s.n_experts, k = s.top_k;
    c.shape = label("n%lld E%lld k%lld noise %g%s", (long long)n, (long long)E, (long long)k, o.noise_std,
                    with_dgates ? "" : " dgates null") +
              note;
    c.dtypes = "f32";
    // probs, expert_idx, gates and counts as the forward saves them (probs of the noisy logits).
    auto r = ref::moe_router_forward(noisy_logits(logits.v, s, o), logits.v, s, o.balance_alpha, o.z_coef,
                                     o.normalize_top_k);
    const float d_balance = 0.7f, d_z = 1.3f;
    const double scale = std::max(1.0, std::fabs(logits.v.empty() ? 1.0 : logits.v[0]));
    c.t = {std::move(logits), input("dgates", DT::F32, with_dgates ? n * k : 0, seed + 1),
           input_values("probs", DT::F32, r.probs), input_values("expert_idx", DT::I32, r.expert_idx),
           input_values("gates", DT::F32, r.gates), input_values("counts", DT::I64, r.counts),
           // the z-loss term grows with the logits' scale (2·lse·q): atol scaled with it
           output_random("dlogits", DT::F32, n * E, seed + 2, tol_rounded(DT::F32, E, 1e-3 * scale))};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_router_backward(b.at<float>(6), with_dgates ? b.at<float>(1) : nullptr, b.at<float>(0), b.at<float>(2),
                               b.at<int32_t>(3), b.at<float>(4), b.at<int64_t>(5), d_balance, d_z, s, o);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::moe_router_backward(t[6].v, t[1].v, t[0].v, t[2].v, t[3].v, t[5].v, d_balance, d_z, s, o.balance_alpha,
                                 o.z_coef, o.normalize_top_k);
    };
    c.flops = 12.0 * double(n * E);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case router_bwd_case(int64_t n, int64_t E, int64_t k, bool with_dgates, uint32_t seed) {
    return router_bwd_case(RouterShape{n, E, k}, input("logits", DT::F32, n * E, seed, -3, 3), router_options(0.0f),
                           with_dgates, seed, "");
}

Case router_bad_k_case() {
    Case c;
    c.op = "moe_router_forward";
    c.shape = "top_k 5 > E 4: throws";
    c.dtypes = "f32";
    c.expect_error = true;
    const RouterShape s{2, 4, 5};
    c.t = {input("logits", DT::F32, 8, 1),      output("probs", DT::F32, 8, Tol{}),  output("idx", DT::I32, 10, Tol{}),
           output("gates", DT::F32, 10, Tol{}), output("counts", DT::I64, 4, Tol{}), output("bal", DT::F32, 1, Tol{}),
           output("z", DT::F32, 1, Tol{})};
    c.run = [s](Backend& be, Bufs& b) {
        be.moe_router_forward(b.at<float>(1), b.at<int32_t>(2), b.at<float>(3), b.at<int64_t>(4), b.at<float>(5),
                              b.at<float>(6), nullptr, b.at<float>(0), s, RouterOptions{});
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

std::vector<double> cyclic_logits() {  // token t: {3, 1, 0, -1} shifted by t: uniform load and mean probability
    const double row[4] = {3.0, 1.0, 0.0, -1.0};
    std::vector<double> v(16);
    for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) v[size_t(t * 4 + e)] = row[(e - t + 4) % 4];
    return v;
}

std::vector<double> imbalanced_logits() {  // everyone prefers expert 0
    Tensor t = input("", DT::F32, 32, 2);
    for (int64_t i = 0; i < 8; ++i) t.v[size_t(i * 4)] += 3.0;
    return t.v;
}

// ---- dispatch, gather, combine

Case dispatch_case(int64_t n, int64_t k, int64_t E, Routing r, uint32_t seed) {
    Case c;
    c.op = "moe_dispatch";
    c.shape = label("n%lld k%lld E%lld %s", (long long)n, (long long)k, (long long)E, routing_name(r));
    c.dtypes = "i32->i64";
    const Tol exact{};
    c.t = {input_values("expert_idx", DT::I32, routing(n, k, E, r, seed)),
           output("sorted_to_copy", DT::I64, n * k, exact), output("copy_to_sorted", DT::I64, n * k, exact),
           output("offsets", DT::I64, E + 1, exact)};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_dispatch(b.at<int64_t>(1), b.at<int64_t>(2), b.at<int64_t>(3), b.at<int32_t>(0), n, k, E);
    };
    c.ref = [E](std::vector<Tensor>& t) { ref::moe_dispatch(t[1].v, t[2].v, t[3].v, t[0].v, E); };
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case gather_fwd_case(int64_t n, int64_t k, int64_t C, int64_t E, Routing r, uint32_t seed) {
    Case c;
    c.op = "moe_gather_forward";
    c.shape = label("n%lld k%lld C%lld %s", (long long)n, (long long)k, (long long)C, routing_name(r));
    c.dtypes = "bf16";
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    c.t = {input("x", DT::BF16, n * C, seed + 1), input_values("sorted_to_copy", DT::I64, d.s2c),
           output("xs", DT::BF16, n * k * C, Tol{0, 0, "a copy of rows: exact"})};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_gather_forward(b.at<bf16>(2), b.at<bf16>(0), b.at<int64_t>(1), n, k, C);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::moe_gather_forward(t[2].v, t[0].v, t[1].v, k, C); };
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case gather_bwd_case(int64_t n, int64_t k, int64_t C, int64_t E, Routing r, bool acc, uint32_t seed) {
    Case c;
    c.op = "moe_gather_backward";
    c.shape = label("n%lld k%lld C%lld %s%s", (long long)n, (long long)k, (long long)C, routing_name(r),
                    acc ? " accumulate" : "");
    c.dtypes = "bf16";
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    const Tol tol = tol_rounded(DT::BF16, k + 1);
    c.t = {input("dxs", DT::BF16, n * k * C, seed + 1), input_values("copy_to_sorted", DT::I64, d.c2s),
           acc ? output_random("dx", DT::BF16, n * C, seed + 2, tol) : output("dx", DT::BF16, n * C, tol)};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_gather_backward(b.at<bf16>(2), b.at<bf16>(0), b.at<int64_t>(1), n, k, C, acc);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::moe_gather_backward(t[2].v, t[0].v, t[1].v, n, k, C, acc); };
    c.flops = double(n * k * C);
    c.bytes = tensor_bytes(c.t, acc);
    return c;
}

Case combine_fwd_case(int64_t n, int64_t k, int64_t C, int64_t E, Routing r, uint32_t seed) {
    Case c;
    c.op = "moe_combine_forward";
    c.shape = label("n%lld k%lld C%lld %s", (long long)n, (long long)k, (long long)C, routing_name(r));
    c.dtypes = "bf16 (gates f32)";
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    c.t = {input("ys", DT::BF16, n * k * C, seed + 1), input("gates", DT::F32, n * k, seed + 2, 0, 1),
           input_values("copy_to_sorted", DT::I64, d.c2s), output("out", DT::BF16, n * C, tol_rounded(DT::BF16, k))};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_combine_forward(b.at<bf16>(3), b.at<bf16>(0), b.at<float>(1), b.at<int64_t>(2), n, k, C);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::moe_combine_forward(t[3].v, t[0].v, t[1].v, t[2].v, n, k, C); };
    c.flops = 2.0 * double(n * k * C);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case combine_bwd_case(int64_t n, int64_t k, int64_t C, int64_t E, Routing r, uint32_t seed) {
    Case c;
    c.op = "moe_combine_backward";
    c.shape = label("n%lld k%lld C%lld %s", (long long)n, (long long)k, (long long)C, routing_name(r));
    c.dtypes = "bf16 (gates f32)";
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    c.t = {input("dout", DT::BF16, n * C, seed),
           input("ys", DT::BF16, n * k * C, seed + 1),
           input("gates", DT::F32, n * k, seed + 2, 0, 1),
           input_values("copy_to_sorted", DT::I64, d.c2s),
           output("dys", DT::BF16, n * k * C, tol_rounded(DT::BF16, 1)),
           output("dgates", DT::F32, n * k, tol_rounded(DT::F32, C, 1e-3))};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_combine_backward(b.at<bf16>(4), b.at<float>(5), b.at<bf16>(0), b.at<bf16>(1), b.at<float>(2),
                                b.at<int64_t>(3), n, k, C);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::moe_combine_backward(&t[4].v, &t[5].v, t[0].v, t[1].v, t[2].v, t[3].v, n, k, C);
    };
    c.flops = 3.0 * double(n * k * C);
    c.bytes = tensor_bytes(c.t);
    return c;
}

// ---- grouped expert matmul

Case moe_mm_fwd_case(int64_t n, int64_t k, int64_t E, int64_t in, int64_t outf, Routing r, DT dt, uint32_t seed,
                     DT wdt = DT::BF16, DT odt = DT::BF16, bool mixed = false) {
    if (!mixed) wdt = odt = dt;
    Case c;
    c.op = "moe_matmul_forward";
    c.shape = label("rows%lld E%lld in%lld out%lld %s", (long long)(n * k), (long long)E, (long long)in,
                    (long long)outf, routing_name(r));
    c.dtypes = mixed ? std::string(dt_name(dt)) + "·" + dt_name(wdt) + "->" + dt_name(odt) : dt_name(dt);
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    const int64_t rows = n * k;
    c.t = {input("inp", dt, rows * in, seed + 1), input("weight", wdt, E * outf * in, seed + 2),
           input_values("offsets", DT::I64, d.offsets), output("out", odt, rows * outf, tol_rounded(odt, in))};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_matmul_forward(b.ref(3), b.ref(0), b.ref(1), b.at<int64_t>(2), E, in, outf);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::moe_matmul_forward(t[3].v, t[0].v, t[1].v, t[2].v, E, in, outf); };
    c.flops = 2.0 * double(rows) * double(in) * double(outf);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case moe_mm_bwd_case(int64_t n, int64_t k, int64_t E, int64_t in, int64_t outf, Routing r, DT dt, DT gdt, bool acc,
                     uint32_t seed, DT wdt_in = DT::F32, bool mixed = false) {
    const DT wdt = mixed ? wdt_in : dt;  // the weight's dtype (activations and dinp: dt)
    Case c;
    c.op = "moe_matmul_backward";
    c.shape = label("rows%lld E%lld in%lld out%lld %s dweight %s%s", (long long)(n * k), (long long)E, (long long)in,
                    (long long)outf, routing_name(r), dt_name(gdt), acc ? " accumulate dinp" : "");
    c.dtypes = (mixed ? std::string(dt_name(dt)) + "·" + dt_name(wdt) : std::string(dt_name(dt))) + "->" + dt_name(gdt);
    const Dispatch d = dispatch_of(n, k, E, r, seed);
    const int64_t rows = n * k;
    // dweight of an expert sums over its rows (all n·k of them when skewed); an empty expert adds nothing.
    const Tol tin = tol_rounded(dt, outf), tw = tol_rounded(gdt, rows);
    c.t = {input("dout", dt, rows * outf, seed),
           input("inp", dt, rows * in, seed + 1),
           input("weight", wdt, E * outf * in, seed + 2),
           input_values("offsets", DT::I64, d.offsets),
           acc ? output_random("dinp", dt, rows * in, seed + 3, tin) : output("dinp", dt, rows * in, tin),
           output_random("dweight", gdt, E * outf * in, seed + 4, tw)};
    c.run = [=](Backend& be, Bufs& b) {
        be.moe_matmul_backward(b.ref(4), b.ref(5), b.ref(0), b.ref(1), b.ref(2), b.at<int64_t>(3), E, in, outf, acc);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::moe_matmul_backward(&t[4].v, &t[5].v, t[0].v, t[1].v, t[2].v, t[3].v, E, in, outf, acc);
    };
    c.flops = 4.0 * double(rows) * double(in) * double(outf);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

// The logits of `n` tokens over E experts with experts hot.. biased by -30: they stay empty.
Tensor biased_logits(int64_t n, int64_t E, int64_t hot, uint32_t seed) {
    Tensor t = input("logits", DT::F32, n * E, seed, -3, 3);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t e = hot; e < E; ++e) t.v[size_t(i * E + e)] -= 30.0;
    return t;
}

// An expert index outside [0, E): the op must refuse (a device backend reports it at synchronize).
Case dispatch_bad_case() {
    Case c;
    c.op = "moe_dispatch";
    c.shape = "expert 9 of E 4 (out of range): throws";
    c.dtypes = "i32->i64";
    c.expect_error = true;
    c.t = {input_values("expert_idx", DT::I32, {0, 1, 9, 2}), output("sorted_to_copy", DT::I64, 4, Tol{}),
           output("copy_to_sorted", DT::I64, 4, Tol{}), output("offsets", DT::I64, 5, Tol{})};
    c.run = [](Backend& be, Bufs& b) {
        be.moe_dispatch(b.at<int64_t>(1), b.at<int64_t>(2), b.at<int64_t>(3), b.at<int32_t>(0), 2, 2, 4);
        be.synchronize();
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

// The CUDA kernels' cases (the removed test_moe.cpp of tests/gpu and test_grouped_gemm.cpp before; docs/backend-ops.md
// "Old tests"): a router with empty experts, dispatch over several 512-key chunks of the counting sort,
// gather and combine on the 16-byte (C % 8 == 0) and scalar paths, the grouped matmul with the first
// and last experts empty, no rows at all, and (large) the paper's 4096 x 4096 expert.
void add_moe_device_cases(std::vector<Case>& out, const TableOptions& o) {
    const Routing S = Routing::SPREAD, K = Routing::SKEWED, Z = Routing::SHIFTED;
    for (int64_t k : {2, 1})
        for (float noise : {0.0f, 0.5f}) {
            const RouterShape s{1000, 16, k};
            const RouterOptions ro = router_options(noise, 42, 7, 3, 12345);
            out.push_back(router_fwd_case(s, biased_logits(1000, 16, 11, 50 + uint32_t(k)), ro,
                                          " experts 11..15 biased by -30 (empty)"));
            out.push_back(router_bwd_case(s, biased_logits(1000, 16, 11, 60 + uint32_t(k)), ro, noise == 0.0f, 61,
                                          " experts 11..15 biased by -30 (empty)"));
        }
    out.push_back(dispatch_case(700, 2, 24, K, 70));
    out.push_back(dispatch_case(3001, 2, 24, S, 71));
    out.push_back(dispatch_case(333, 2, 16, Z, 72));
    out.push_back(dispatch_bad_case());
    for (int64_t C : {72, 36}) {  // C % 8 == 0: the 16-byte path
        out.push_back(gather_fwd_case(333, 2, C, 12, S, 80));
        out.push_back(gather_bwd_case(333, 2, C, 12, S, false, 81));
        out.push_back(gather_bwd_case(333, 2, C, 12, S, true, 82));
        out.push_back(combine_fwd_case(333, 2, C, 12, S, 83));
        out.push_back(combine_bwd_case(333, 2, C, 12, S, 84));
    }
    out.push_back(moe_mm_fwd_case(500, 2, 10, 64, 96, S, DT::BF16, 90));
    out.push_back(moe_mm_bwd_case(500, 2, 10, 64, 96, S, DT::BF16, DT::F32, true, 91));
    out.push_back(moe_mm_bwd_case(500, 2, 10, 64, 96, K, DT::BF16, DT::BF16, false, 92));
    out.push_back(moe_mm_fwd_case(167, 2, 16, 40, 24, Z, DT::BF16, 93));
    out.push_back(moe_mm_bwd_case(167, 2, 16, 40, 24, Z, DT::BF16, DT::F32, false, 94));
    out.push_back(moe_mm_fwd_case(7, 1, 4, 32, 32, Z, DT::BF16, 95));  // one expert of four, 7 rows
    out.push_back(moe_mm_bwd_case(7, 1, 4, 32, 32, Z, DT::BF16, DT::BF16, true, 96));
    out.push_back(moe_mm_fwd_case(0, 2, 3, 32, 32, S, DT::BF16, 97));  // no rows at all
    out.push_back(moe_mm_bwd_case(0, 2, 3, 32, 32, S, DT::BF16, DT::F32, true, 98));
    if (o.large) {  // the paper's expert (d_model 4096 -> 4096: 2^24 weights, the most a test tensor holds), 8 rows
        out.push_back(large_row(moe_mm_fwd_case(8, 1, 1, 4096, 4096, S, DT::BF16, 99)));
        out.push_back(large_row(moe_mm_bwd_case(8, 1, 1, 4096, 4096, S, DT::BF16, DT::F32, true, 100)));
        out.push_back(large_row(moe_mm_bwd_case(8, 1, 1, 4096, 4096, S, DT::BF16, DT::BF16, false, 101)));
    }
}

}  // namespace

void add_moe_cases(std::vector<Case>& out, const TableOptions& o) {
    const Routing S = Routing::SPREAD, K = Routing::SKEWED;
    if (o.perf) {
        // The paper: 64 x 128 tokens, 128 experts of d_ff 4096 on d_model 4096, top-2 (CPU: 1 x 128
        // tokens and 8 experts: 128 experts' weights are 4 GiB per bank).
        const PerfDims d = perf_dims(o);
        const int64_t n = d.batch * d.seq_len, E = d.n_experts, C = d.d_model, F = d.d_ff;
        out.push_back(router_fwd_case(n, E, 2, 0.5f, false, 1));
        out.push_back(router_bwd_case(n, E, 2, true, 2));
        out.push_back(dispatch_case(n, 2, E, S, 3));
        out.push_back(gather_fwd_case(n, 2, C, E, S, 4));
        out.push_back(gather_bwd_case(n, 2, C, E, S, false, 5));
        out.push_back(moe_mm_fwd_case(n, 2, E, C, F, S, DT::BF16, 6));
        out.push_back(moe_mm_bwd_case(n, 2, E, C, F, S, DT::BF16, DT::F32, false, 7));
        out.push_back(combine_fwd_case(n, 2, C, E, S, 8));
        out.push_back(combine_bwd_case(n, 2, C, E, S, 9));
        return;
    }
    out.push_back(router_fwd_case(37, 8, 2, 0.0f, false, 1));
    out.push_back(router_fwd_case(1, 4, 1, 0.0f, false, 2));  // T = 1, top-1: the gate is the probability
    out.push_back(router_fwd_case(64, 128, 2, 0.0f, false, 3));
    out.push_back(router_fwd_case(20, 6, 3, 0.5f, false, 4));  // training noise
    out.push_back(router_fwd_case(5, 4, 2, 0.0f, true, 5));
    out.push_back(router_fwd_case({4, 4, 2}, input_values("logits", DT::F32, cyclic_logits()), router_options(0.0f),
                                  " cyclic logits: uniform load, balance = alpha"));
    out.push_back(router_fwd_case({8, 4, 2}, input_values("logits", DT::F32, imbalanced_logits()), router_options(0.0f),
                                  " expert 0 preferred: balance above alpha"));
    for (uint32_t step : {7u, 8u})  // the noise keyed by (seed, step, tensor, element)
        out.push_back(router_fwd_case({6, 4, 2}, input_values("logits", DT::F32, std::vector<double>(24, 0.0)),
                                      router_options(0.5f, 42, step, 3, 100),
                                      label(" on zero logits, seed 42 step %u tensor 3 offset 100", step)));
    out.push_back(router_fwd_case({4, 8, 2}, input("logits", DT::F32, 32, 3, 300, 900), router_options(0.0f),
                                  " logits in [300, 900): finite z-loss"));
    out.push_back(router_bad_k_case());
    {  // top-8 of 64 without renormalization (OLMoE: model.normalize_top_k false)
        RouterOptions o = router_options(0.0f);
        o.normalize_top_k = false;
        out.push_back(router_fwd_case({20, 64, 8}, input("logits", DT::F32, 20 * 64, 11, -3, 3), o,
                                      " top-8, gates not renormalized"));
        out.push_back(
            router_fwd_case({9, 8, 2}, input("logits", DT::F32, 72, 12, -3, 3), o, " gates not renormalized"));
        out.push_back(router_bwd_case({20, 64, 8}, input("logits", DT::F32, 20 * 64, 13, -3, 3), o, true, 14,
                                      " top-8, gates not renormalized"));
    }
    out.push_back(router_bwd_case(37, 8, 2, true, 6));
    out.push_back(router_bwd_case(16, 5, 1, true, 7));
    out.push_back(router_bwd_case(9, 128, 3, false, 8));
    out.push_back(router_bwd_case({4, 8, 2}, input("logits", DT::F32, 32, 3, 300, 900), router_options(0.0f), true, 9,
                                  " logits in [300, 900)"));
    out.push_back(router_bwd_case({6, 5, 2}, input("logits", DT::F32, 30, 10, -2, 2), router_options(0.5f, 9), true, 10,
                                  " (probs of the noisy logits)"));
    out.push_back(dispatch_case(37, 2, 8, S, 10));
    out.push_back(dispatch_case(37, 2, 8, K, 11));
    out.push_back(dispatch_case(1, 1, 5, S, 12));
    out.push_back(dispatch_case(64, 2, 128, S, 13));
    out.push_back(gather_fwd_case(37, 2, 67, 8, S, 20));
    out.push_back(gather_fwd_case(1, 1, 16, 3, S, 21));
    out.push_back(gather_bwd_case(37, 2, 67, 8, S, false, 22));
    out.push_back(gather_bwd_case(20, 3, 32, 5, K, true, 23));
    out.push_back(moe_mm_fwd_case(37, 2, 8, 40, 24, S, DT::BF16, 30));
    out.push_back(moe_mm_fwd_case(37, 2, 8, 40, 24, K, DT::BF16, 31));
    out.push_back(moe_mm_fwd_case(20, 2, 5, 33, 17, S, DT::F32, 32));
    out.push_back(moe_mm_fwd_case(1, 1, 4, 64, 32, S, DT::BF16, 33));
    out.push_back(moe_mm_fwd_case(20, 2, 5, 33, 17, K, DT::BF16, 37, DT::F32, DT::F32, true));  // fp32 weights
    out.push_back(moe_mm_bwd_case(37, 2, 8, 40, 24, S, DT::BF16, DT::F32, false, 34));
    out.push_back(moe_mm_bwd_case(37, 2, 8, 40, 24, K, DT::BF16, DT::BF16, true, 35));
    out.push_back(moe_mm_bwd_case(20, 2, 5, 33, 17, S, DT::F32, DT::F32, false, 36));
    out.push_back(moe_mm_bwd_case(20, 2, 5, 33, 17, K, DT::BF16, DT::F32, false, 38, DT::F32, true));
    out.push_back(combine_fwd_case(37, 2, 67, 8, S, 40));
    out.push_back(combine_fwd_case(20, 3, 32, 5, K, 41));
    out.push_back(combine_fwd_case(1, 1, 16, 2, S, 42));
    out.push_back(combine_bwd_case(37, 2, 67, 8, S, 43));
    out.push_back(combine_bwd_case(20, 3, 32, 5, K, 44));
    add_moe_device_cases(out, o);
}

namespace {

std::vector<int64_t> as_i64(const std::vector<double>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

}  // namespace

void add_moe_grad_cases(std::vector<GradCase>& out) {
    for (int64_t top_k : {2, 1, -3})        // -3: top-3 with the gates not renormalized (model.normalize_top_k false)
        for (float noise : {0.0f, 0.5f}) {  // the loss Σ gates·r + 0.7 balance + 1.3 z at a fixed top-k choice
            const bool normalize = top_k > 0;
            if (!normalize && noise != 0.0f) continue;
            struct S {
                RouterShape s;
                RouterOptions o;
                std::vector<float> logits, r;
            };
            auto st = std::make_shared<S>();
            st->s = RouterShape{6, 5, normalize ? top_k : -top_k};
            st->o = router_options(noise, 9);
            st->o.normalize_top_k = normalize;
            st->o.balance_alpha = 0.5f;  // large weights so every term shows in the check
            st->o.z_coef = 0.1f;
            const Tensor lg = input_normal("", DT::F32, 30, 5);
            st->logits.assign(lg.v.begin(), lg.v.end());
            st->r = uniform_f32(6 * st->s.top_k, 4);
            GradCase g;
            g.op = "moe_router_backward";
            g.shape = label("n6 E5 k%lld noise %g%s, loss gates·r + 0.7 balance + 1.3 z", (long long)st->s.top_k, noise,
                            normalize ? "" : " not renormalized");
            g.in = {{"logits", &st->logits, 1e-3f, 3e-4, 1e-2, "fp32 softmax, eps 1e-3: rounding ~1e-4 / 2e-3"}};
            auto forward = [st](std::vector<float>& probs, std::vector<int32_t>& idx, std::vector<float>& gates,
                                std::vector<int64_t>& counts, float& bal, float& z) {
                const int64_t n = st->s.n_tokens, E = st->s.n_experts, k = st->s.top_k;
                probs.resize(size_t(n * E)), gates.resize(size_t(n * k)), idx.resize(size_t(n * k));
                counts.resize(static_cast<size_t>(E));
                cpu::moe_router_forward(probs.data(), idx.data(), gates.data(), counts.data(), &bal, &z, nullptr,
                                        st->logits.data(), st->s, st->o);
            };
            g.loss = [st, forward] {
                std::vector<float> probs, gates;
                std::vector<int32_t> idx;
                std::vector<int64_t> counts;
                float bal = 0, z = 0;
                forward(probs, idx, gates, counts, bal, z);
                return dot_f32(gates, st->r) + 0.7 * bal + 1.3 * z;
            };
            g.analytic = [st, forward] {
                std::vector<float> probs, gates, dl(st->logits.size());
                std::vector<int32_t> idx;
                std::vector<int64_t> counts;
                float bal = 0, z = 0;
                forward(probs, idx, gates, counts, bal, z);
                cpu::moe_router_backward(dl.data(), st->r.data(), st->logits.data(), probs.data(), idx.data(),
                                         gates.data(), counts.data(), 0.7f, 1.3f, st->s, st->o);
                return std::vector<std::vector<float>>{dl};
            };
            g.state = st;
            out.push_back(std::move(g));
        }
    {  // gather, grouped matmul and combine of one routing (fp32)
        struct S {
            int64_t n = 7, k = 2, E = 4, C = 5, F = 3;
            Dispatch d = dispatch_of(7, 2, 4, Routing::SPREAD, 9);
            std::vector<float> x = uniform_f32(35, 3), xs = uniform_f32(70, 4), w = uniform_f32(4 * 3 * 5, 5),
                               ys = uniform_f32(70, 6), gates = uniform_f32(14, 7, 0, 1), r_xs = uniform_f32(70, 8),
                               r_h = uniform_f32(42, 9), r_out = uniform_f32(35, 10);
        };
        auto st = std::make_shared<S>();
        const std::string why = "linear in each input: fd exact up to the loss's fp32 rounding";
        {
            GradCase g;
            g.op = "moe_gather_backward";
            g.shape = "n7 k2 C5 E4";
            g.in = {{"x", &st->x, 1e-2f, 1e-4, 1e-3, why}};
            g.loss = [st] {
                std::vector<float> xs(size_t(st->n * st->k * st->C));
                cpu::moe_gather_forward(xs.data(), st->x.data(), as_i64(st->d.s2c).data(), st->n, st->k, st->C);
                return dot_f32(xs, st->r_xs);
            };
            g.analytic = [st] {
                std::vector<float> dx(st->x.size());
                cpu::moe_gather_backward(dx.data(), st->r_xs.data(), as_i64(st->d.c2s).data(), st->n, st->k, st->C,
                                         false);
                return std::vector<std::vector<float>>{dx};
            };
            g.state = st;
            out.push_back(std::move(g));
        }
        {
            GradCase g;
            g.op = "moe_matmul_backward";
            g.shape = "rows14 E4 in5 out3";
            g.in = {{"inp", &st->xs, 1e-2f, 1e-4, 1e-3, why}, {"weight", &st->w, 1e-2f, 1e-4, 1e-3, why}};
            g.loss = [st] {
                std::vector<float> h(size_t(st->n * st->k * st->F));
                cpu::moe_matmul_forward(TensorRef(h.data()), ConstTensorRef(st->xs.data()),
                                        ConstTensorRef(st->w.data()), as_i64(st->d.offsets).data(), st->E, st->C,
                                        st->F);
                return dot_f32(h, st->r_h);
            };
            g.analytic = [st] {
                std::vector<float> dinp(st->xs.size()), dw(st->w.size(), 0.0f);
                cpu::moe_matmul_backward(TensorRef(dinp.data()), TensorRef(dw.data()), ConstTensorRef(st->r_h.data()),
                                         ConstTensorRef(st->xs.data()), ConstTensorRef(st->w.data()),
                                         as_i64(st->d.offsets).data(), st->E, st->C, st->F, false);
                return std::vector<std::vector<float>>{dinp, dw};
            };
            g.state = st;
            out.push_back(std::move(g));
        }
        {
            GradCase g;
            g.op = "moe_combine_backward";
            g.shape = "n7 k2 C5 E4";
            g.in = {{"ys", &st->ys, 1e-2f, 1e-4, 1e-3, why}, {"gates", &st->gates, 1e-2f, 1e-4, 1e-3, why}};
            g.loss = [st] {
                std::vector<float> o(size_t(st->n * st->C));
                cpu::moe_combine_forward(o.data(), st->ys.data(), st->gates.data(), as_i64(st->d.c2s).data(), st->n,
                                         st->k, st->C);
                return dot_f32(o, st->r_out);
            };
            g.analytic = [st] {
                std::vector<float> dys(st->ys.size()), dg(st->gates.size());
                cpu::moe_combine_backward(dys.data(), dg.data(), st->r_out.data(), st->ys.data(), st->gates.data(),
                                          as_i64(st->d.c2s).data(), st->n, st->k, st->C);
                return std::vector<std::vector<float>>{dys, dg};
            };
            g.state = st;
            out.push_back(std::move(g));
        }
    }
}

}  // namespace skew::ops
