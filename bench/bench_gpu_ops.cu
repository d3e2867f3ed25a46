// GPU micro-benchmarks of the CUDA backend's ops at the paper's shapes (docs/design.md: d_model 4096,
// 32/8 heads of 128, 128 experts top-2, hidden 4096, batch 64 x 128, vocabulary 50,304): dense
// cuBLASLt GEMMs (the ceiling), the grouped expert GEMM (per-expert loop) against a dense GEMM of
// the same FLOPs with uniform, skewed and empty-expert routing, and every other kernel's time with
// its achieved bandwidth or FLOP rate. Built and run by bench/gpu_check.sh; writes JSON lines.
// Usage: bench_gpu_ops [out.jsonl] [--quick]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/moe_matmul.h"

using namespace skew;

namespace {

FILE* g_out = nullptr;

void* dalloc(size_t bytes) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes));
    cuda_check(cudaMemset(p, 0, bytes));
    return p;
}

__global__ void fill_bf16_kernel(bf16* p, int64_t n, uint32_t seed, float amp) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        const float u = float(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
        p[i] = f32_to_bf16(u * amp);
    }
}

bf16* random_bf16(int64_t n, uint32_t seed, float amp = 1.0f) {
    auto* p = static_cast<bf16*>(dalloc(static_cast<size_t>(n) * 2));
    fill_bf16_kernel<<<1024, 256>>>(p, n, seed, amp);
    cuda_check_kernel("fill_bf16_kernel");
    return p;
}

// Median-free simple timing: warmup, then `iters` runs between two events; ms per run.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int iters) {
    fn();
    fn();
    cudaEvent_t a, b;
    cuda_check(cudaEventCreate(&a));
    cuda_check(cudaEventCreate(&b));
    cuda_check(cudaEventRecord(a, s));
    for (int i = 0; i < iters; ++i) fn();
    cuda_check(cudaEventRecord(b, s));
    cuda_check(cudaEventSynchronize(b));
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return double(ms) / iters;
}

void report(const std::string& name, double ms, double flops, double bytes, const std::string& extra = "") {
    const double tflops = flops > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
    const double gbs = bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0;
    std::printf("%-58s %9.3f ms %8.1f TFLOP/s %8.1f GB/s %s\n", name.c_str(), ms, tflops, gbs, extra.c_str());
    if (g_out)
        std::fprintf(g_out, "{\"name\": \"%s\", \"ms\": %.6f, \"tflops\": %.3f, \"gbs\": %.3f%s%s}\n", name.c_str(), ms,
                     tflops, gbs, extra.empty() ? "" : ", ", extra.c_str());
    std::fflush(stdout);
}

// Expert offsets (E+1) for `rows` rows: uniform, skewed (Zipf-like), or with every 4th expert empty.
std::vector<int64_t> make_offsets(int64_t rows, int64_t E, const std::string& kind) {
    std::vector<double> w(static_cast<size_t>(E), 1.0);
    for (int64_t e = 0; e < E; ++e) {
        if (kind == "skewed") w[static_cast<size_t>(e)] = 1.0 / double(e + 1);
        if (kind == "empty") w[static_cast<size_t>(e)] = e % 4 == 0 ? 0.0 : 1.0;
    }
    double sum = 0.0;
    for (double x : w) sum += x;
    std::vector<int64_t> off(static_cast<size_t>(E + 1), 0);
    int64_t given = 0;
    for (int64_t e = 0; e < E; ++e) {
        int64_t c = int64_t(std::floor(double(rows) * w[static_cast<size_t>(e)] / sum));
        off[static_cast<size_t>(e + 1)] = off[static_cast<size_t>(e)] + c;
        given += c;
    }
    // remainder to the first non-empty expert, keeping offsets monotone
    int64_t first = 0;
    while (w[static_cast<size_t>(first)] == 0.0) ++first;
    for (int64_t e = first; e < E; ++e) off[static_cast<size_t>(e + 1)] += rows - given;
    return off;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    const char* out_path = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else out_path = argv[i];
    }
    if (cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_gpu_ops: no CUDA device visible\n");
        return 2;
    }
    if (out_path) g_out = std::fopen(out_path, "w");
    std::printf("device: %s\n", cuda::device_name(0).c_str());
    cuda::CudaBackend be(0);
    cudaStream_t st = be.stream();
    const int iters = quick ? 3 : 10;

    // ---- the paper's shapes
    const int64_t B = 64, T = 128, N = B * T, C = 4096, HID = 4096, H = 32, KV = 8, D = 128, E = 128, K = 2;
    const int64_t V = 50257, Vp = 50304;

    // ---- dense GEMMs (cuBLASLt): linear forward, data gradient, weight gradient
    {
        bf16* x = random_bf16(N * C, 1);
        bf16* w = random_bf16(HID * C, 2, 0.05f);
        bf16* y = random_bf16(N * HID, 3);
        float* dw = static_cast<float*>(dalloc(static_cast<size_t>(HID * C) * 4));
        const double f = 2.0 * double(N) * double(C) * double(HID);
        report("dense gemm fwd bf16 (8192x4096x4096)", time_ms(st, [&] { be.matmul_forward(y, x, w, N, C, HID); }, iters), f, 0);
        report("dense gemm dgrad bf16", time_ms(st, [&] { be.matmul(x, y, w, MatmulShape{N, C, HID}); }, iters), f, 0);
        report("dense gemm wgrad fp32 accumulate",
               time_ms(st, [&] { be.matmul(dw, y, x, MatmulShape{HID, C, N, true, false, 1.0f, 1.0f}); }, iters), f, 0);
        cudaFree(x);
        cudaFree(w);
        cudaFree(y);
        cudaFree(dw);
    }

    // ---- grouped expert GEMM (per-expert cuBLASLt loop) vs a dense GEMM of the same FLOPs
    {
        const int64_t rows = N * K;
        bf16* xs = random_bf16(rows * C, 4);
        bf16* w = random_bf16(E * HID * C, 5, 0.05f);  // 4 GiB: one expert bank (E, HID, C)
        bf16* ys = random_bf16(rows * HID, 6);
        float* dw = static_cast<float*>(dalloc(static_cast<size_t>(E * HID * C) * 4));
        int64_t* off_d = static_cast<int64_t*>(dalloc(static_cast<size_t>(E + 1) * 8));
        const double f = 2.0 * double(rows) * double(C) * double(HID);
        const double dense_ms = time_ms(st, [&] { be.matmul_forward(ys, xs, w, rows, C, HID); }, iters);
        report("dense gemm same flops (16384x4096x4096)", dense_ms, f, 0);
        for (const std::string kind : {"uniform", "skewed", "empty"}) {
            const auto off = make_offsets(rows, E, kind);
            cuda_check(cudaMemcpy(off_d, off.data(), off.size() * 8, cudaMemcpyHostToDevice));
            const double fwd = time_ms(st, [&] { be.moe_matmul_forward(ys, xs, w, off_d, E, C, HID); }, iters);
            report("grouped gemm fwd " + kind, fwd, f, 0,
                   "\"fraction_of_dense\": " + std::to_string(dense_ms / fwd));
            const double dg = time_ms(st, [&] { be.moe_matmul_backward(xs, nullptr, ys, xs, w, off_d, E, C, HID, false); }, iters);
            report("grouped gemm dgrad " + kind, dg, f, 0, "\"fraction_of_dense\": " + std::to_string(dense_ms / dg));
            const double wg = time_ms(st, [&] { be.moe_matmul_backward(nullptr, dw, ys, xs, w, off_d, E, C, HID, false); }, iters);
            report("grouped gemm wgrad (variable K) " + kind, wg, f, 0,
                   "\"fraction_of_dense\": " + std::to_string(dense_ms / wg));
        }
        cudaFree(xs);
        cudaFree(w);
        cudaFree(ys);
        cudaFree(dw);
        cudaFree(off_d);
    }

    // ---- attention (flash-style, CUDA cores): B 64, T 128, 32/8 heads of 128
    {
        const AttentionShape s{B, T, H, KV, D};
        bf16* q = random_bf16(N * H * D, 7);
        bf16* k = random_bf16(N * KV * D, 8);
        bf16* v = random_bf16(N * KV * D, 9);
        bf16* o = random_bf16(N * H * D, 10);
        bf16* dq = random_bf16(N * H * D, 11);
        bf16* dk = random_bf16(N * KV * D, 12);
        bf16* dv = random_bf16(N * KV * D, 13);
        float* lse = static_cast<float*>(dalloc(static_cast<size_t>(B * H * T) * 4));
        const double f = 2.0 * 2.0 * double(B) * double(H) * double(T) * double(T) * double(D) / 2.0;  // causal
        report("attention forward (64x128, 32/8 heads, d 128)",
               time_ms(st, [&] { be.attention_forward(o, lse, q, k, v, s); }, iters), f, 0);
        report("attention backward", time_ms(st, [&] { be.attention_backward(dq, dk, dv, o, q, k, v, o, lse, s); }, iters),
               2.5 * f, 0);
        for (bf16* p : {q, k, v, o, dq, dk, dv}) cudaFree(p);
        cudaFree(lse);
    }

    // ---- memory-bound kernels
    {
        bf16* a = random_bf16(N * HID, 14);
        bf16* b = random_bf16(N * HID, 15);
        bf16* c = random_bf16(N * HID, 16);
        bf16* d = random_bf16(N * HID, 17);
        const double n = double(N * HID);
        report("swiglu forward", time_ms(st, [&] { be.swiglu_forward(c, a, b, N * HID); }, iters), 0, 3 * 2 * n);
        report("swiglu backward", time_ms(st, [&] { be.swiglu_backward(c, d, a, a, b, N * HID); }, iters), 0, 5 * 2 * n);
        report("residual forward", time_ms(st, [&] { be.residual_forward(c, a, b, N * HID); }, iters), 0, 3 * 2 * n);
        float* w = static_cast<float*>(dalloc(static_cast<size_t>(C) * 4));
        float* bias = static_cast<float*>(dalloc(static_cast<size_t>(C) * 4));
        float* mean = static_cast<float*>(dalloc(static_cast<size_t>(N) * 4));
        float* rstd = static_cast<float*>(dalloc(static_cast<size_t>(N) * 4));
        report("layernorm forward (8192x4096)",
               time_ms(st, [&] { be.layernorm_forward(c, mean, rstd, a, w, bias, N, C, 1e-5f); }, iters), 0, 2 * 2 * n);
        report("layernorm backward",
               time_ms(st, [&] { be.layernorm_backward(d, w, bias, b, a, w, mean, rstd, N, C, true); }, iters), 0,
               4 * 2 * n);
        // embedding
        std::vector<int32_t> tok(static_cast<size_t>(N));
        std::mt19937 gen(1);
        for (auto& t : tok) t = int32_t(gen() % uint32_t(V));
        int32_t* tok_d = static_cast<int32_t*>(dalloc(static_cast<size_t>(N) * 4));
        cuda_check(cudaMemcpy(tok_d, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice));
        bf16* wte = random_bf16(Vp * C, 18, 0.05f);
        bf16* wpe = random_bf16(T * C, 19, 0.05f);
        float* dwte = static_cast<float*>(dalloc(static_cast<size_t>(Vp * C) * 4));
        float* dwpe = static_cast<float*>(dalloc(static_cast<size_t>(T * C) * 4));
        report("embedding forward", time_ms(st, [&] { be.embedding_forward(c, tok_d, wte, wpe, B, T, C, Vp); }, iters), 0,
               3 * 2 * double(N * C));
        report("embedding backward (sorted, deterministic)",
               time_ms(st, [&] { be.embedding_backward(dwte, dwpe, c, tok_d, B, T, C, Vp); }, iters), 0,
               2 * double(N * C) + 8 * double(N * C));
        // grad norm over 1 GiB of fp32 gradients in 4 buffers
        float* g = static_cast<float*>(dalloc(static_cast<size_t>(1) << 30));
        const int64_t q4 = (int64_t(1) << 28) / 4;
        const std::vector<BufferRef> bufs{{g, q4}, {g + q4, q4}, {g + 2 * q4, q4}, {g + 3 * q4, q4}};
        report("sum_squares (grad norm, 1 GiB fp32)", time_ms(st, [&] { be.sum_squares(bufs); }, iters), 0,
               double(int64_t(1) << 30));
        // fused LM head + cross-entropy vs its three GEMMs alone
        std::vector<int32_t> tg(static_cast<size_t>(N));
        for (auto& t : tg) t = int32_t(gen() % uint32_t(V));
        int32_t* tg_d = static_cast<int32_t*>(dalloc(static_cast<size_t>(N) * 4));
        cuda_check(cudaMemcpy(tg_d, tg.data(), tg.size() * 4, cudaMemcpyHostToDevice));
        const ClassifierShape cs{N, C, V, Vp};
        void* ws = dalloc(static_cast<size_t>(be.lm_head_workspace_bytes(cs)));
        float* mean_loss = static_cast<float*>(dalloc(4));
        const double fl = 3 * 2.0 * double(N) * double(Vp) * double(C);
        report("lm head + cross-entropy fused (fwd+bwd)",
               time_ms(st, [&] { be.lm_head_cross_entropy(mean_loss, nullptr, a, dwte, a, wte, tg_d, 1.0f, cs, ws); }, quick ? 1 : 3),
               fl, 0, "\"workspace_mib\": " + std::to_string(be.lm_head_workspace_bytes(cs) >> 20));
        for (void* p : {(void*)a, (void*)b, (void*)c, (void*)d, (void*)w, (void*)bias, (void*)mean, (void*)rstd, (void*)tok_d,
                        (void*)wte, (void*)wpe, (void*)dwte, (void*)dwpe, (void*)g, (void*)tg_d, ws, (void*)mean_loss})
            cudaFree(p);
    }

    // ---- router, dispatch, gather, combine (n = 8192 tokens, E 128, top-2, C 4096)
    {
        float* logits = static_cast<float*>(dalloc(static_cast<size_t>(N * E) * 4));
        std::vector<float> lg(static_cast<size_t>(N * E));
        std::mt19937 gen(2);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (auto& x : lg) x = nd(gen);
        cuda_check(cudaMemcpy(logits, lg.data(), lg.size() * 4, cudaMemcpyHostToDevice));
        float* probs = static_cast<float*>(dalloc(static_cast<size_t>(N * E) * 4));
        float* dlogits = static_cast<float*>(dalloc(static_cast<size_t>(N * E) * 4));
        int32_t* idx = static_cast<int32_t*>(dalloc(static_cast<size_t>(N * K) * 4));
        float* gates = static_cast<float*>(dalloc(static_cast<size_t>(N * K) * 4));
        int64_t* counts = static_cast<int64_t*>(dalloc(static_cast<size_t>(E) * 8));
        float* losses = static_cast<float*>(dalloc(16));
        const RouterShape rs{N, E, K};
        RouterOptions ro;
        ro.noise_std = 0.5f;
        report("router forward (softmax, top-2, losses)",
               time_ms(st, [&] { be.moe_router_forward(probs, idx, gates, counts, losses, losses + 1, nullptr, logits, rs, ro); }, iters),
               0, 3 * 4 * double(N * E));
        report("router backward", time_ms(st, [&] { be.moe_router_backward(dlogits, gates, logits, probs, idx, gates, counts, 1.0f, 1.0f, rs, ro); }, iters),
               0, 3 * 4 * double(N * E));
        int64_t* s2c = static_cast<int64_t*>(dalloc(static_cast<size_t>(N * K) * 8));
        int64_t* c2s = static_cast<int64_t*>(dalloc(static_cast<size_t>(N * K) * 8));
        int64_t* off = static_cast<int64_t*>(dalloc(static_cast<size_t>(E + 1) * 8));
        report("dispatch (stable counting sort)", time_ms(st, [&] { be.moe_dispatch(s2c, c2s, off, idx, N, K, E); }, iters), 0,
               double(N * K) * 20);
        bf16* x = random_bf16(N * C, 20);
        bf16* xs = random_bf16(N * K * C, 21);
        report("gather forward", time_ms(st, [&] { be.moe_gather_forward(xs, x, s2c, N, K, C); }, iters), 0, 3 * 2 * double(N * C) * K / 2 * 2);
        report("gather backward", time_ms(st, [&] { be.moe_gather_backward(x, xs, c2s, N, K, C, true); }, iters), 0, 2 * 2 * double(N * C) + 2 * double(N * K * C));
        report("combine forward", time_ms(st, [&] { be.moe_combine_forward(x, xs, gates, c2s, N, K, C); }, iters), 0, 2 * double(N * C) + 2 * double(N * K * C));
        report("combine backward", time_ms(st, [&] { be.moe_combine_backward(xs, gates, x, xs, gates, c2s, N, K, C); }, iters), 0, 2 * double(N * C) + 4 * double(N * K * C));
        for (void* p : {(void*)logits, (void*)probs, (void*)dlogits, (void*)idx, (void*)gates, (void*)counts, (void*)losses,
                        (void*)s2c, (void*)c2s, (void*)off, (void*)x, (void*)xs})
            cudaFree(p);
    }
    be.synchronize();
    if (g_out) std::fclose(g_out);
    std::printf("bench_gpu_ops: done\n");
    return 0;
}
