// CPU op benchmark: milliseconds per call of every Backend op, forward and backward, at the
// shapes of one microbatch of bench_step's moe10m model (d_model 128, 8 experts top-2, GPT-2
// vocabulary padded to 50,304, batch 8 x 128), and each op against its floor: the bytes it must
// move over the copy bandwidth measured in the same run at the same working set per thread, or
// its FLOPs over the rate of OpenBLAS's sgemm (the best of the LM head's three product shapes,
// every thread at once), whichever is larger; fraction = floor / time. Also the fused LM head's two element-wise tile passes
// and the host parameter initialization. Not a test. Writes JSON with the commit and OpenBLAS core.
// Usage: bench_ops [--reps N] [--out FILE]
#include <cblas.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/workspace_sizes.h"

using namespace skew;

using skew::bench::shell;

// Best-of-reps milliseconds of fn() (one warm-up call first); each rep repeats fn until 2 ms
// have passed, so microsecond ops are timed over many calls.
static double time_ms(int reps, const std::function<void()>& fn) {
    fn();
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
        int calls = 0;
        double ms = 0;
        const auto t0 = std::chrono::steady_clock::now();
        do {
            fn();
            ++calls;
            ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        } while (ms < 2.0);
        best = std::min(best, ms / calls);
    }
    return best;
}

// Copy bandwidth in GB/s (bytes read + written per second, all threads) with a working set of
// `bytes_per_thread` per thread: each thread memcpy's half of it onto the other half, many times
// inside one parallel region (no fork per copy), best of reps.
static double copy_gbps(int64_t bytes_per_thread, int reps) {
    const int threads = omp_get_max_threads();
    const size_t half = size_t(std::max<int64_t>(bytes_per_thread / 2, 2048));
    const int copies = int(std::clamp<int64_t>((int64_t(64) << 20) / int64_t(half), 4, 1 << 16));
    std::vector<std::vector<char>> bufs(size_t(threads), std::vector<char>(2 * half, 1));
    const double ms = time_ms(reps, [&] {
#pragma omp parallel num_threads(threads)
        {
            char* b = bufs[size_t(omp_get_thread_num())].data();
            for (int k = 0; k < copies; ++k) {
                std::memcpy(b + (k % 2) * half, b + (1 - k % 2) * half, half);
                __asm__ volatile("" : : "r"(b) : "memory");  // keep every copy
            }
        }
    });
    return double(threads) * double(copies) * 2.0 * double(half) / (ms * 1e-3) / 1e9;
}

// OpenBLAS sgemm rate in GFLOP/s with every thread running one product of the fused LM head's
// shapes on its own operands, single-threaded: its logits tile (chunk x 256 vocabulary columns x
// d_model, NT), its input gradient (chunk x d_model x 256, NN) or its embedding gradient
// (256 x d_model x chunk, TN).
static double sgemm_gflops(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int reps) {
    const int threads = omp_get_max_threads();
    std::vector<std::vector<float>> a(size_t(threads), std::vector<float>(size_t(m * k), 0.01f)),
        b(size_t(threads), std::vector<float>(size_t(k * n), 0.02f)),
        c(size_t(threads), std::vector<float>(size_t(m * n)));
    const skew::cpu::BlasSerialScope serial_blas;
    const double ms = time_ms(reps, [&] {
#pragma omp parallel num_threads(threads)
        {
            const size_t t = size_t(omp_get_thread_num());
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
                        int(k), 1.0f, a[t].data(), int(ta ? m : k), b[t].data(), int(tb ? k : n), 0.0f, c[t].data(),
                        int(n));
        }
    });
    return double(threads) * 2.0 * double(m * n * k) / (ms * 1e-3) / 1e9;
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
        if (a == "--reps" && i + 1 < argc) reps = std::stoi(argv[++i]);
        else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_ops [--reps N] [--out FILE]\n");
            return 2;
        }
    }
    auto be = make_cpu_backend();
    const int64_t B = 8, T = 128, C = 128, H = 4, KV = 2, D = 32, E = 8, K = 2, F = 1024, V = 50257, Vp = 50304;
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

    const int threads = omp_get_max_threads();
    // the sgemm rate a FLOP floor is held to: the best of the LM head's three product shapes
    const int64_t chunk = cpu::lm_head_chunk_tokens(ClassifierShape{N, C, V, Vp}), TB = cpu_ws::LM_HEAD_BLOCK_COLS;
    const nlohmann::json sgemm_shapes = {
        {"NT chunk x 256 x d_model (logits tile)", sgemm_gflops(false, true, chunk, TB, C, reps)},
        {"NN chunk x d_model x 256 (input gradient)", sgemm_gflops(false, false, chunk, C, TB, reps)},
        {"TN 256 x d_model x chunk (embedding gradient)", sgemm_gflops(true, false, TB, C, chunk, reps)}};
    double sgemm_rate = 0;
    for (const auto& [shape, rate] : sgemm_shapes.items()) sgemm_rate = std::max(sgemm_rate, rate.get<double>());
    std::map<int64_t, double> copy_rates;  // GB/s by working set per thread (power of two)
    auto copy_rate = [&](int64_t ws) {
        int64_t p2 = 4096;
        while (p2 < ws) p2 *= 2;
        if (!copy_rates.count(p2)) copy_rates[p2] = copy_gbps(p2, reps);
        return copy_rates[p2];
    };
    for (const auto& [shape, rate] : sgemm_shapes.items())
        std::printf("sgemm %s on each of %d threads: %.1f GFLOP/s\n", shape.c_str(), threads, rate.get<double>());
    std::printf("%-36s %9s %9s %8s %s\n", "op", "ms", "floor ms", "fraction", "bound");

    nlohmann::json ops = nlohmann::json::array();
    // bytes: what the op must read and write at least; ws: its working set per thread (default
    // bytes / threads), which decides the cache level of the copy bandwidth it is held to.
    auto run = [&](const char* name, double flop, double bytes, const std::function<void()>& fn, double ws = 0) {
        const double ms = time_ms(reps, fn);
        const double gbps = bytes > 0 ? copy_rate(int64_t(ws > 0 ? ws : bytes / threads)) : 0.0;
        const double bytes_ms = bytes > 0 ? bytes / (gbps * 1e9) * 1e3 : 0.0;
        const double flop_ms = flop > 0 ? flop / (sgemm_rate * 1e9) * 1e3 : 0.0;
        const double floor_ms = std::max(bytes_ms, flop_ms);
        const char* bound = flop_ms >= bytes_ms ? "sgemm" : "copy";
        std::printf("%-36s %9.3f %9.3f %8.3f %s\n", name, ms, floor_ms, floor_ms / ms, bound);
        ops.push_back({{"op", name},
                       {"ms", ms},
                       {"flop", flop},
                       {"bytes", bytes},
                       {"gflop_per_s", flop > 0 ? flop / (ms * 1e-3) / 1e9 : 0.0},
                       {"gb_per_s", bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0},
                       {"copy_gb_per_s_at_working_set", gbps},
                       {"floor_ms", floor_ms},
                       {"floor_bound", bound},
                       {"fraction_of_floor", floor_ms / ms}});
    };
    const double b16 = 2, f32 = 4;  // bytes per element
    const double NC = double(N * C), NKC = double(N * K * C), NF = double(N * F);
    run("embedding_forward", 0, NC * b16 * 2 + double(T * C) * b16 + double(N) * 4,
        [&] { be->embedding_forward(y.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, Vp); });
    run("embedding_backward", 0, NC * (b16 + 2 * f32) + double(T * C) * 2 * f32 + double(N) * 4,
        [&] { be->embedding_backward(dwte_f.data(), dwpe_f.data(), g.data(), tokens.data(), B, T, C, Vp); });
    run("layernorm_forward", 0, NC * b16 * 2 + double(N) * 2 * f32,
        [&] { be->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), ln_w.data(), ln_b.data(), N, C); });
    run("layernorm_backward", 0, NC * b16 * 3 + double(N) * 2 * f32, [&] {
        be->layernorm_backward(dx.data(), dln_w.data(), dln_b.data(), g.data(), x.data(), ln_w.data(), mean.data(),
                               rstd.data(), N, C);
    });
    run("matmul_forward (q projection)", 2.0 * N * C * H * D, (NC + double(H * D * C) + double(N * H * D)) * b16,
        [&] { be->matmul_forward(q.data(), x.data(), wq.data(), N, C, H * D); });
    run("matmul_backward (q projection)", 4.0 * N * C * H * D,
        (2 * NC + double(N * H * D)) * b16 + double(H * D * C) * (b16 + 2 * f32),
        [&] { be->matmul_backward(dx.data(), dwq.data(), att.data(), x.data(), wq.data(), N, C, H * D); });
    // causal: QK^T and PV over the lower triangle, T^2 D multiply-adds each per (batch, head);
    // backward recomputes P and forms dV, dP, dQ, dK: 5 such products
    const double att_fwd_flop = 2.0 * B * H * T * T * D, att_bytes = double(N * (2 * H + 2 * KV) * D) * b16;
    run("attention_forward", att_fwd_flop, att_bytes + double(B * H * T) * f32,
        [&] { be->attention_forward(att.data(), lse.data(), q.data(), k.data(), v.data(), as); });
    run("attention_backward", 2.5 * att_fwd_flop, 2 * att_bytes + double(N * H * D) * b16 + double(B * H * T) * f32,
        [&] {
            be->attention_backward(dq.data(), dk.data(), dv.data(), att.data(), q.data(), k.data(), v.data(),
                                   att.data(), lse.data(), as);
        });
    run("swiglu_forward", 0, NF * 3 * b16, [&] { be->swiglu_forward(h.data(), a1.data(), a2.data(), N * F); });
    run("swiglu_backward", 0, NF * 5 * b16,
        [&] { be->swiglu_backward(da1.data(), da2.data(), h.data(), a1.data(), a2.data(), N * F); });
    run("moe_router_forward (noise on)", 0, double(N * E) * 2 * f32 + double(N * K) * (4 + f32), [&] {
        be->moe_router_forward(probs.data(), idx.data(), gates.data(), counts.data(), &bal, &zl, nullptr, logits.data(),
                               rs, ro);
    });
    run("moe_router_backward", 0, double(N * E) * 3 * f32 + double(N * K) * (4 + 2 * f32), [&] {
        be->moe_router_backward(dlogits.data(), dgates.data(), logits.data(), probs.data(), idx.data(), gates.data(),
                                counts.data(), 1.0f, 1.0f, rs, ro);
    });
    run("moe_dispatch", 0, double(N * K) * (4 + 2 * 8),
        [&] { be->moe_dispatch(s2c.data(), c2s.data(), offsets.data(), idx.data(), N, K, E); });
    run("moe_gather_forward", 0, (NC + NKC) * b16 + double(N * K) * 8,
        [&] { be->moe_gather_forward(xs.data(), x.data(), s2c.data(), N, K, C); });
    run("moe_matmul_forward (w1)", 2.0 * N * K * C * F, (NKC + double(N * K * F) + double(E * F * C)) * b16,
        [&] { be->moe_matmul_forward(hs.data(), xs.data(), w1.data(), offsets.data(), E, C, F); });
    run("moe_matmul_backward (w1)", 4.0 * N * K * C * F,
        (2 * NKC + double(N * K * F)) * b16 + double(E * F * C) * (b16 + 2 * f32), [&] {
            be->moe_matmul_backward(dxs.data(), dw1.data(), hs.data(), xs.data(), w1.data(), offsets.data(), E, C, F);
        });
    run("moe_combine_forward", 0, (NKC + NC) * b16 + double(N * K) * (f32 + 8),
        [&] { be->moe_combine_forward(y.data(), xs.data(), gates.data(), c2s.data(), N, K, C); });
    run("moe_combine_backward", 0, (2 * NKC + NC) * b16 + double(N * K) * (2 * f32 + 8), [&] {
        be->moe_combine_backward(dxs.data(), dgates.data(), g.data(), xs.data(), gates.data(), c2s.data(), N, K, C);
    });
    const double head_flop = 2.0 * N * Vp * C;
    run("lm_head_cross_entropy (fwd only)", head_flop, double(Vp * C) * b16 + NC * b16, [&] {
        be->lm_head_cross_entropy(&loss, nullptr, nullptr, nullptr, x.data(), wte.data(), tokens.data(), 1.0f, cs,
                                  ws.data());
    });
    // the embedding gradient in bf16 (runtime.grad_dtype's default): accumulated in fp32, added at the end
    std::vector<bf16> dwte16(static_cast<size_t>(Vp * C));
    run("lm_head_cross_entropy (fwd + bwd)", 3 * head_flop, double(Vp * C) * b16 * 3 + 2 * NC * b16, [&] {
        be->lm_head_cross_entropy(&loss, nullptr, dx.data(), dwte16.data(), x.data(), wte.data(), tokens.data(), 1.0f,
                                  cs, ws.data());
    });

    // The head's element-wise passes over all N x Vp logits, as lm_head_cross_entropy runs them:
    // tile by tile (chunk x 256 columns, fresh from its product, so in cache: each thread here
    // reuses one tile), the vocabulary groups spread over the threads.
    const int64_t n_tiles = (Vp + TB - 1) / TB;
    std::vector<std::vector<float>> tiles(size_t(threads), std::vector<float>(size_t(chunk * TB)));
    for (auto& t : tiles)
        for (size_t i = 0; i < t.size(); ++i) t[i] = float(int64_t(i * 7919) % 2000) * 0.005f - 5.0f;
    std::vector<float> tmax(size_t(threads * chunk)), tinv(size_t(chunk), 1e-5f), rmax(size_t(chunk), 5.0f);
    std::vector<double> tsum(size_t(threads * chunk));
    const double tile_bytes = double(chunk * TB) * f32, logits_elems = double(N) * double(Vp);
    run(
        "lm_head tile softmax stats (N x Vp)", 0, logits_elems * f32,
        [&] {
            for (int64_t c0 = 0; c0 < N; c0 += chunk) {
#pragma omp parallel for schedule(dynamic, 1)
                for (int64_t t = 0; t < n_tiles; ++t) {
                    const size_t me = size_t(omp_get_thread_num());
                    const int64_t cw = std::min(TB, Vp - t * TB);
                    std::fill(tmax.begin() + int64_t(me) * chunk, tmax.begin() + int64_t(me + 1) * chunk, -INFINITY);
                    cpu::lm_head_tile_softmax_stats(tiles[me].data(), cw, chunk, std::clamp<int64_t>(V - t * TB, 0, cw),
                                                    tmax.data() + me * chunk, tsum.data() + me * chunk);
                }
            }
        },
        tile_bytes);
    run(
        "lm_head tile dlogits (N x Vp)", 0, logits_elems * 2 * f32,
        [&] {
            for (int64_t c0 = 0; c0 < N; c0 += chunk) {
#pragma omp parallel for schedule(dynamic, 1)
                for (int64_t t = 0; t < n_tiles; ++t) {
                    const size_t me = size_t(omp_get_thread_num());
                    const int64_t cw = std::min(TB, Vp - t * TB);
                    cpu::lm_head_tile_dlogits(tiles[me].data(), cw, chunk, t * TB, cw, V, rmax.data(), tinv.data(),
                                              tokens.data() + c0, 0.0f);
                }
            }
        },
        2 * tile_bytes);

    // Parameter initialization (the host draw every CPU run starts with): moe10m's 10.1M weights, bf16.
    const int64_t n_init = 10'090'000;
    std::vector<bf16> init_buf(static_cast<size_t>(n_init));
    run("init_normal (10.1M bf16)", 0, double(n_init) * b16,
        [&] { be->init_normal(TensorRef(init_buf.data(), ScalarType::BF16), n_init, 1234, 7, 0.02f); });

    nlohmann::json result;
    result["bench"] = "ops";
    result["backend"] = be->name();
    skew::bench::add_provenance(result, "kernels bench");
    result["threads"] = omp_get_max_threads();
    result["shape"] = {{"batch", B},       {"seq_len", T},  {"d_model", C},      {"n_heads", H},
                       {"n_kv_heads", KV}, {"head_dim", D}, {"n_experts", E},    {"top_k", K},
                       {"d_ff", F},        {"vocab", V},    {"padded_vocab", Vp}};
    result["reps"] = reps;
    result["sgemm_gflop_per_s"] = sgemm_rate;
    result["sgemm_gflop_per_s_by_shape"] = sgemm_shapes;  // one single-threaded call per thread, all at once
    nlohmann::json copies = nlohmann::json::object();
    for (const auto& [bytes, gbps] : copy_rates) copies[std::to_string(bytes)] = gbps;
    result["copy_gb_per_s_by_working_set_bytes_per_thread"] = copies;
    result["ops"] = ops;
    skew::bench::emit_result(result, out_path);
    return 0;
}
