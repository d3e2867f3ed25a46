// CPU op benchmark: milliseconds per call of every Backend op, forward and backward, at the
// shapes of one microbatch of the CPU comparison model (d_model 128, 8 experts top-2, GPT-2
// vocabulary padded to 50,304, batch 8 x 128). Not a test. Writes JSON with the commit.
// Usage: bench_ops [--reps N] [--out FILE]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/backend.h"

using namespace skew;

using skew::bench::shell;

// Best-of-reps milliseconds of fn() (one warm-up call first).
static double time_ms(int reps, const std::function<void()>& fn) {
    fn();
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// A bf16 buffer of n values in [-scale, scale), deterministic.
static std::vector<bf16> fill_bf16(int64_t n, float scale, uint32_t seed) {
    std::vector<bf16> v(static_cast<size_t>(n));
    uint32_t s = seed * 2654435761u + 1u;
    for (auto& x : v) {
        s = s * 1664525u + 1013904223u;
        x = f32_to_bf16(scale * (float(s >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
    return v;
}

int main(int argc, char** argv) {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    int reps = 5;
    std::string out_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc)
            reps = std::stoi(argv[++i]);
        else if (a == "--out" && i + 1 < argc)
            out_path = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_ops [--reps N] [--out FILE]\n");
            return 2;
        }
    }
    auto be = make_cpu_backend();
    const int64_t B = 8, T = 128, C = 128, H = 4, KV = 2, D = 32, E = 8, K = 2, F = 512, V = 50257, Vp = 50304;
    const int64_t N = B * T;

    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) tokens[size_t(i)] = int32_t((i * 7919) % V);
    const auto wte = fill_bf16(Vp * C, 0.02f, 1), wpe = fill_bf16(T * C, 0.02f, 2), x = fill_bf16(N * C, 1.0f, 3);
    const auto g = fill_bf16(N * C, 0.01f, 4);
    std::vector<bf16> y(static_cast<size_t>(N * C)), dx(static_cast<size_t>(N * C));
    std::vector<float> dwte_f(static_cast<size_t>(Vp * C)), dwpe_f(static_cast<size_t>(T * C));
    std::vector<float> ln_w(static_cast<size_t>(C), 1.0f), ln_b(static_cast<size_t>(C), 0.0f), dln_w(ln_w), dln_b(ln_b);
    std::vector<float> mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    const auto wq = fill_bf16(H * D * C, 0.02f, 5);
    std::vector<float> dwq(static_cast<size_t>(H * D * C));
    std::vector<bf16> q(static_cast<size_t>(N * H * D));
    const auto k = fill_bf16(N * KV * D, 1.0f, 6), v = fill_bf16(N * KV * D, 1.0f, 7);
    std::vector<bf16> att(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> lse(static_cast<size_t>(B * H * T));
    const auto a1 = fill_bf16(N * F, 2.0f, 8), a2 = fill_bf16(N * F, 2.0f, 9);
    std::vector<bf16> h(static_cast<size_t>(N * F)), da1(h.size()), da2(h.size());
    std::vector<float> wr(static_cast<size_t>(E * C), 0.01f), logits(static_cast<size_t>(N * E)),
        dlogits(logits.size());
    std::vector<float> probs(logits.size()), gates(static_cast<size_t>(N * K)), dgates(gates.size(), 0.1f),
        dwr(wr.size());
    std::vector<int32_t> idx(static_cast<size_t>(N * K));
    std::vector<int64_t> counts(static_cast<size_t>(E)), s2c(static_cast<size_t>(N * K)), c2s(s2c.size()),
        offsets(static_cast<size_t>(E + 1));
    float bal = 0.0f, zl = 0.0f;
    const auto w1 = fill_bf16(E * F * C, 0.02f, 10);
    std::vector<bf16> xs(static_cast<size_t>(N * K * C)), hs(static_cast<size_t>(N * K * F)), dxs(xs.size()),
        dhs(hs.size());
    std::vector<float> dw1(static_cast<size_t>(E * F * C));
    const ClassifierShape cs{N, C, V, Vp};
    std::vector<char> ws(static_cast<size_t>(be->lm_head_workspace_bytes(cs)));
    float loss = 0.0f;
    const AttentionShape as{B, T, H, KV, D};
    const RouterShape rs{N, E, K};
    RouterOptions ro;
    ro.noise_std = 0.5f;

    // router + dispatch once so the expert ops see a real plan
    be->matmul_forward(logits.data(), x.data(), wr.data(), N, C, E);
    be->moe_router_forward(probs.data(), idx.data(), gates.data(), counts.data(), &bal, &zl, nullptr, logits.data(), rs,
                           ro);
    be->moe_dispatch(s2c.data(), c2s.data(), offsets.data(), idx.data(), N, K, E);
    be->moe_gather_forward(xs.data(), x.data(), s2c.data(), N, K, C);

    nlohmann::json ops = nlohmann::json::array();
    auto run = [&](const char* name, double flop, const std::function<void()>& fn) {
        const double ms = time_ms(reps, fn);
        const double gflops = flop > 0 ? flop / (ms * 1e-3) / 1e9 : 0.0;
        std::printf("%-34s %9.3f ms%s\n", name, ms,
                    flop > 0 ? (" " + std::to_string(gflops) + " GFLOP/s").c_str() : "");
        ops.push_back({{"op", name}, {"ms", ms}, {"gflop_per_s", gflops}});
    };
    run("embedding_forward", 0,
        [&] { be->embedding_forward(y.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, Vp); });
    run("embedding_backward", 0,
        [&] { be->embedding_backward(dwte_f.data(), dwpe_f.data(), g.data(), tokens.data(), B, T, C, Vp); });
    run("layernorm_forward", 0,
        [&] { be->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), ln_w.data(), ln_b.data(), N, C); });
    run("layernorm_backward", 0, [&] {
        be->layernorm_backward(dx.data(), dln_w.data(), dln_b.data(), g.data(), x.data(), ln_w.data(), mean.data(),
                               rstd.data(), N, C);
    });
    run("matmul_forward (q projection)", 2.0 * N * C * H * D,
        [&] { be->matmul_forward(q.data(), x.data(), wq.data(), N, C, H * D); });
    run("matmul_backward (q projection)", 4.0 * N * C * H * D,
        [&] { be->matmul_backward(dx.data(), dwq.data(), att.data(), x.data(), wq.data(), N, C, H * D); });
    run("attention_forward", 2.0 * B * H * T * T * D,
        [&] { be->attention_forward(att.data(), lse.data(), q.data(), k.data(), v.data(), as); });
    run("attention_backward", 4.0 * B * H * T * T * D, [&] {
        be->attention_backward(dq.data(), dk.data(), dv.data(), att.data(), q.data(), k.data(), v.data(), att.data(),
                               lse.data(), as);
    });
    run("swiglu_forward", 0, [&] { be->swiglu_forward(h.data(), a1.data(), a2.data(), N * F); });
    run("swiglu_backward", 0,
        [&] { be->swiglu_backward(da1.data(), da2.data(), h.data(), a1.data(), a2.data(), N * F); });
    run("moe_router_forward (noise on)", 0, [&] {
        be->moe_router_forward(probs.data(), idx.data(), gates.data(), counts.data(), &bal, &zl, nullptr, logits.data(),
                               rs, ro);
    });
    run("moe_router_backward", 0, [&] {
        be->moe_router_backward(dlogits.data(), dgates.data(), logits.data(), probs.data(), idx.data(), gates.data(),
                                counts.data(), 1.0f, 1.0f, rs, ro);
    });
    run("moe_dispatch", 0, [&] { be->moe_dispatch(s2c.data(), c2s.data(), offsets.data(), idx.data(), N, K, E); });
    run("moe_gather_forward", 0, [&] { be->moe_gather_forward(xs.data(), x.data(), s2c.data(), N, K, C); });
    run("moe_matmul_forward (w1)", 2.0 * N * K * C * F,
        [&] { be->moe_matmul_forward(hs.data(), xs.data(), w1.data(), offsets.data(), E, C, F); });
    run("moe_matmul_backward (w1)", 4.0 * N * K * C * F, [&] {
        be->moe_matmul_backward(dxs.data(), dw1.data(), hs.data(), xs.data(), w1.data(), offsets.data(), E, C, F);
    });
    run("moe_combine_forward", 0,
        [&] { be->moe_combine_forward(y.data(), xs.data(), gates.data(), c2s.data(), N, K, C); });
    run("moe_combine_backward", 0, [&] {
        be->moe_combine_backward(dxs.data(), dgates.data(), g.data(), xs.data(), gates.data(), c2s.data(), N, K, C);
    });
    run("lm_head_cross_entropy (fwd only)", 2.0 * N * Vp * C, [&] {
        be->lm_head_cross_entropy(&loss, nullptr, nullptr, nullptr, x.data(), wte.data(), tokens.data(), 1.0f, cs,
                                  ws.data());
    });
    run("lm_head_cross_entropy (fwd + bwd)", 6.0 * N * Vp * C, [&] {
        be->lm_head_cross_entropy(&loss, nullptr, dx.data(), dwte_f.data(), x.data(), wte.data(), tokens.data(), 1.0f,
                                  cs, ws.data());
    });

    nlohmann::json result;
    result["bench"] = "ops";
    result["backend"] = be->name();
    skew::bench::add_provenance(result, "kernels bench");
    result["threads"] = omp_get_max_threads();
    result["shape"] = {{"batch", B},       {"seq_len", T},  {"d_model", C},      {"n_heads", H},
                       {"n_kv_heads", KV}, {"head_dim", D}, {"n_experts", E},    {"top_k", K},
                       {"d_ff", F},        {"vocab", V},    {"padded_vocab", Vp}};
    result["reps"] = reps;
    result["ops"] = ops;
    skew::bench::emit_result(result, out_path);
    return 0;
}
