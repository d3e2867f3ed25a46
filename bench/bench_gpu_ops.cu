// GPU micro-benchmarks of the CUDA backend's ops at the paper's shapes (docs/design.md: d_model 4096,
// 32/8 heads of 128, 128 experts top-2, hidden 4096, batch 64 x 128, vocabulary 50,304): dense
// cuBLASLt GEMMs (the ceiling), the grouped expert GEMM (per-expert loop) against a dense GEMM of
// the same FLOPs with uniform, skewed and empty-expert routing, and every other kernel's time with
// its achieved bandwidth or FLOP rate, the optimizer steps at the paper's parameter set
// (bench/bench_gpu_optim.cu), and Muon's and GaLore's steps (bench/bench_gpu_muon.cuh,
// bench/gpu_galore_bench.cpp). Built and run by bench/gpu_check.sh; writes JSON lines.
// Usage: bench_gpu_ops [out.jsonl] [--quick] [--optim-config configs/paper-6.78b.yaml] [--only-optim]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/moe_matmul.h"
#include "bench/gpu_galore_bench.h"
#include "bench/bench_gpu_optim.h"

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

// ==== GEMM section: dense ceiling, grouped expert GEMM algorithms, LM head (kernels/cuda/matmul.*,
// moe_matmul.*, cross_entropy.cu). Every rate is reported against ceilings measured in this run:
// the dense bf16 GEMM of the same FLOPs ("fraction_of_dense") and, for the weight gradient (per
// expert 4096 x 4096 with k ~ 128 rows: memory-bound), the device-to-device copy bandwidth
// ("fraction_of_memory_floor" = time to move dW in and out and the inputs once at that bandwidth
// / measured time).
namespace {

void bench_gemm_section(cuda::CudaBackend& be, cudaStream_t st, int iters, bool quick) {
    const int64_t B = 64, T = 128, N = B * T, C = 4096, HID = 4096, E = 128, K = 2;
    const int64_t V = 50257, Vp = 50304;
    std::printf("---- GEMM section\n");
    // copy bandwidth (read + write bytes per second): the memory ceiling of this run
    double copy_gbs = 0.0;
    {
        const size_t bytes = size_t(1) << 31;
        void* a = dalloc(bytes);
        void* b = dalloc(bytes);
        const double ms = time_ms(st, [&] { cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); }, iters);
        copy_gbs = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
        report("gemm section: device copy 2 GiB (memory ceiling)", ms, 0, 2.0 * double(bytes));
        cudaFree(a);
        cudaFree(b);
    }
    // grouped expert GEMM, both algorithms, offsets prefetched once (as after a dispatch)
    {
        const int64_t rows = N * K;
        bf16* xs = random_bf16(rows * C, 104);
        bf16* w = random_bf16(E * HID * C, 105, 0.05f);
        bf16* ys = random_bf16(rows * HID, 106);
        float* dw32 = static_cast<float*>(dalloc(static_cast<size_t>(E * HID * C) * 4));
        bf16* dw16 = static_cast<bf16*>(dalloc(static_cast<size_t>(E * HID * C) * 2));
        int64_t* off_d = static_cast<int64_t*>(dalloc(static_cast<size_t>(E + 1) * 8));
        const double f = 2.0 * double(rows) * double(C) * double(HID);
        const double dense_ms = time_ms(st, [&] { be.matmul_forward(ys, xs, w, rows, C, HID); }, iters);
        report("gemm section: dense bf16 (16384x4096x4096)", dense_ms, f, 0);
        cuda::GroupedMatmul& gm = be.grouped_matmul();
        for (const auto algo : {cuda::GroupedGemmAlgo::PER_EXPERT_LOOP, cuda::GroupedGemmAlgo::CUBLAS_GROUPED}) {
            gm.set_algo(algo);
            const std::string an = cuda::grouped_gemm_algo_name(algo);
            for (const std::string kind : {"uniform", "skewed", "empty"}) {
                const auto off = make_offsets(rows, E, kind);
                int64_t nonempty = 0;
                for (int64_t e = 0; e < E; ++e) nonempty += off[size_t(e + 1)] > off[size_t(e)];
                cuda_check(cudaMemcpy(off_d, off.data(), off.size() * 8, cudaMemcpyHostToDevice));
                be.synchronize();
                gm.prefetch_offsets(off_d, E, st);
                const std::string tag = " " + an + " " + kind;
                const double fwd = time_ms(st, [&] { be.moe_matmul_forward(ys, xs, w, off_d, E, C, HID); }, iters);
                report("gemm section: grouped fwd" + tag, fwd, f, 0, "\"fraction_of_dense\": " + std::to_string(dense_ms / fwd));
                const double dg =
                    time_ms(st, [&] { be.moe_matmul_backward(xs, nullptr, ys, xs, w, off_d, E, C, HID, false); }, iters);
                report("gemm section: grouped dgrad" + tag, dg, f, 0, "\"fraction_of_dense\": " + std::to_string(dense_ms / dg));
                for (const int fp32 : {1, 0}) {
                    const TensorRef dw = fp32 ? TensorRef(dw32) : TensorRef(dw16);
                    const double wb = fp32 ? 4.0 : 2.0;
                    // floor: every non-empty expert's dW read and written once, the inputs read once
                    const double bytes = 2.0 * wb * double(nonempty) * double(HID * C) + 2.0 * double(rows) * double(C + HID);
                    const double floor_ms = bytes / (copy_gbs * 1e9) * 1e3;
                    const double wg =
                        time_ms(st, [&] { be.moe_matmul_backward(nullptr, dw, ys, xs, w, off_d, E, C, HID, false); }, iters);
                    report(std::string("gemm section: grouped wgrad ") + (fp32 ? "fp32" : "bf16") + tag, wg, f, bytes,
                           "\"fraction_of_dense\": " + std::to_string(dense_ms / wg) +
                               ", \"floor_ms\": " + std::to_string(floor_ms) +
                               ", \"fraction_of_memory_floor\": " + std::to_string(floor_ms / wg) +
                               ", \"floor_tflops\": " + std::to_string(f / (floor_ms * 1e-3) / 1e12));
                }
                be.synchronize();
            }
        }
        gm.set_algo(cuda::GroupedGemmAlgo::PER_EXPERT_LOOP);
        for (void* p : {(void*)xs, (void*)w, (void*)ys, (void*)dw32, (void*)dw16, (void*)off_d}) cudaFree(p);
    }
    // LM head + cross-entropy (8,192 tokens x 50,304 x 4096): the fused op with bf16 and fp32 dwte
    // against its three GEMMs timed alone in this run (the floor of any head built on them)
    {
        bf16* x = random_bf16(N * C, 107);
        bf16* dx = random_bf16(N * C, 108);
        bf16* wte = random_bf16(Vp * C, 109, 0.05f);
        float* dwte32 = static_cast<float*>(dalloc(static_cast<size_t>(Vp * C) * 4));
        bf16* dwte16 = static_cast<bf16*>(dalloc(static_cast<size_t>(Vp * C) * 2));
        bf16* dlogits = random_bf16(N * Vp, 110, 1e-4f);
        std::vector<int32_t> tg(static_cast<size_t>(N));
        std::mt19937 gen(3);
        for (auto& t : tg) t = int32_t(gen() % uint32_t(V));
        int32_t* tg_d = static_cast<int32_t*>(dalloc(static_cast<size_t>(N) * 4));
        cuda_check(cudaMemcpy(tg_d, tg.data(), tg.size() * 4, cudaMemcpyHostToDevice));
        const ClassifierShape cs{N, C, V, Vp};
        const int64_t ws_bytes = be.lm_head_workspace_bytes(cs);
        void* ws = dalloc(static_cast<size_t>(ws_bytes));
        float* mean_loss = static_cast<float*>(dalloc(4));
        const double g1 = 2.0 * double(N) * double(Vp) * double(C);
        const int hi = quick ? 1 : 3;
        // the three GEMMs alone (logits fp32 in the chunk size the head uses, dx, dwte)
        const int64_t chunk = cuda::lm_head_chunk_tokens(cs);
        float* logits = static_cast<float*>(ws);
        const double t_logits = time_ms(st, [&] {
            for (int64_t i0 = 0; i0 < N; i0 += chunk)
                be.matmul(TensorRef(logits), ConstTensorRef(x + i0 * C), ConstTensorRef(wte),
                          MatmulShape{std::min(chunk, N - i0), Vp, C, false, true});
        }, hi);
        report("gemm section: lm head logits gemm (chunks, fp32 out)", t_logits, g1, 0);
        const double t_dx = time_ms(st, [&] { be.matmul(dx, dlogits, wte, MatmulShape{N, C, Vp}); }, hi);
        report("gemm section: lm head dx gemm (bf16)", t_dx, g1, 0);
        const double t_dw = time_ms(st, [&] { be.matmul(dwte16, dlogits, x, MatmulShape{Vp, C, N, true, false, 1.0f, 1.0f}); }, hi);
        report("gemm section: lm head dwte gemm (bf16, k 8192)", t_dw, g1, 0);
        const double gemms = t_logits + t_dx + t_dw;
        for (const int fp32 : {0, 1}) {
            const TensorRef dw = fp32 ? TensorRef(dwte32) : TensorRef(dwte16);
            const double ms = time_ms(
                st, [&] { be.lm_head_cross_entropy(mean_loss, nullptr, dx, dw, x, wte, tg_d, 1.0f, cs, ws); }, hi);
            report(std::string("gemm section: lm head + cross-entropy fused (fwd+bwd, dwte ") + (fp32 ? "fp32" : "bf16") + ")",
                   ms, 3 * g1, 0,
                   "\"three_gemms_ms\": " + std::to_string(gemms) + ", \"fraction_of_gemm_floor\": " +
                       std::to_string(gemms / ms) + ", \"target_ms\": 12, \"workspace_mib\": " + std::to_string(ws_bytes >> 20));
        }
        for (void* p : {(void*)x, (void*)dx, (void*)wte, (void*)dwte32, (void*)dwte16, (void*)dlogits, (void*)tg_d, ws,
                        (void*)mean_loss})
            cudaFree(p);
    }
    std::printf("---- end of GEMM section\n");
}

}  // namespace

#include "bench/bench_gpu_muon.cuh"

int main(int argc, char** argv) {
    bool quick = false, only_optim = false;
    const char* out_path = nullptr;
    std::string optim_config = "configs/paper-6.78b.yaml";
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) quick = true;
        else if (std::strcmp(argv[i], "--only-optim") == 0) only_optim = true;
        else if (std::strcmp(argv[i], "--optim-config") == 0 && i + 1 < argc) optim_config = argv[++i];
        else out_path = argv[i];
    }
    if (cuda::device_count() == 0) {
        std::fprintf(stderr, "bench_gpu_ops: no CUDA device visible\n");
        return 2;
    }
    if (out_path) g_out = std::fopen(out_path, "w");
    std::printf("device: %s\n", cuda::device_name(0).c_str());
    // ---- optimizer steps at the paper's parameter set (bench/bench_gpu_optim.cu; its own section)
    try {
        bench::bench_gpu_optimizers(g_out, optim_config, quick);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu_ops: optimizer section failed: %s\n", e.what());
        if (only_optim) return 1;
    }
    if (only_optim) {
        if (g_out) std::fclose(g_out);
        return 0;
    }

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

    bench_gemm_section(be, st, iters, quick);

    // ======== attention (flash-style, tensor cores: kernels/cuda/attention_mma.cuh) ========
    // Causal GQA, 32 query heads / 8 KV heads, at the paper's 64 x 128 and at long contexts with the
    // batch scaled down (16 x 1024, 4 x 4096), head_dim 128 (and 64 at 64 x 128). FLOPs counted
    // for the causal half: forward 4·B·H·T²·D / 2, backward 2.5x that (the five GEMMs of
    // FlashAttention-2; this backward recomputes S and dP in its dQ kernel, 7 GEMMs of work).
    // fraction_of_dense: TFLOP/s over a dense cuBLASLt bf16 GEMM timed in this section. "without D":
    // the dK/dV and dQ kernels alone (the public backward also forms D = rowsum(dO∘O) first).
    {
        double dense_tflops = 0.0;
        {
            bf16* x = random_bf16(N * C, 40);
            bf16* w = random_bf16(HID * C, 41, 0.05f);
            bf16* y = random_bf16(N * HID, 42);
            const double ms = time_ms(st, [&] { be.matmul_forward(y, x, w, N, C, HID); }, iters);
            dense_tflops = 2.0 * double(N) * double(C) * double(HID) / (ms * 1e-3) / 1e12;
            for (bf16* p : {x, w, y}) cudaFree(p);
        }
        struct AttnCase {
            int64_t batch, seq_len, head_dim;
        };
        for (const AttnCase c : {AttnCase{B, T, D}, AttnCase{B, T, 64}, AttnCase{16, 1024, D}, AttnCase{4, 4096, D}}) {
            const AttentionShape s{c.batch, c.seq_len, H, KV, c.head_dim};
            const int64_t nq = c.batch * c.seq_len * H * c.head_dim, nkv = c.batch * c.seq_len * KV * c.head_dim;
            bf16* q = random_bf16(nq, 7);
            bf16* k = random_bf16(nkv, 8);
            bf16* v = random_bf16(nkv, 9);
            bf16* o = random_bf16(nq, 10);
            bf16* dout = random_bf16(nq, 14);
            bf16* dq = random_bf16(nq, 11);
            bf16* dk = random_bf16(nkv, 12);
            bf16* dv = random_bf16(nkv, 13);
            float* lse = static_cast<float*>(dalloc(static_cast<size_t>(c.batch * H * c.seq_len) * 4));
            be.attention_forward(o, lse, q, k, v, s);  // a real out and lse for the backward
            const double f = 4.0 * double(c.batch) * double(H) * double(c.seq_len) * double(c.seq_len) *
                             double(c.head_dim) / 2.0;
            char tag_buf[64];
            std::snprintf(tag_buf, sizeof tag_buf, "(%lldx%lld, 32/8 heads, d %lld)", static_cast<long long>(c.batch),
                          static_cast<long long>(c.seq_len), static_cast<long long>(c.head_dim));
            const std::string tag = tag_buf;
            const std::string path = cuda::attention_uses_tensor_cores(q, k, v, o, s) ? "tensor cores" : "cuda cores";
            const double fwd = time_ms(st, [&] { be.attention_forward(o, lse, q, k, v, s); }, iters);
            report("attention forward " + tag, fwd, f, 0,
                   "\"path\": \"" + path + "\", \"fraction_of_dense\": " + std::to_string(f / (fwd * 1e9) / dense_tflops));
            const double bwd = time_ms(st, [&] { be.attention_backward(dq, dk, dv, dout, q, k, v, o, lse, s); }, iters);
            report("attention backward " + tag, bwd, 2.5 * f, 0,
                   "\"path\": \"" + path + "\", \"fraction_of_dense\": " +
                       std::to_string(2.5 * f / (bwd * 1e9) / dense_tflops));
            // The same kernels with a key tile of 32 (a third block per SM at head_dim 128), called
            // directly: which tile the public entry points should use is decided from these figures.
            if (path == "tensor cores") {
                float* dvec = static_cast<float*>(dalloc(static_cast<size_t>(c.batch * H * c.seq_len) * 4));
                const double fwd32 =
                    time_ms(st, [&] { cuda::attention_forward_mma(o, lse, q, k, v, s, st, 32); }, iters);
                report("attention forward key tile 32 " + tag, fwd32, f, 0,
                       "\"fraction_of_dense\": " + std::to_string(f / (fwd32 * 1e9) / dense_tflops));
                const double bwd32 = time_ms(
                    st, [&] { cuda::attention_backward_mma(dq, dk, dv, dout, q, k, v, lse, dvec, s, st, 32); }, iters);
                report("attention backward key tile 32, without D " + tag, bwd32, 2.5 * f, 0,
                       "\"fraction_of_dense\": " + std::to_string(2.5 * f / (bwd32 * 1e9) / dense_tflops));
                const double bwd64 = time_ms(
                    st, [&] { cuda::attention_backward_mma(dq, dk, dv, dout, q, k, v, lse, dvec, s, st, 64); }, iters);
                report("attention backward key tile 64, without D " + tag, bwd64, 2.5 * f, 0,
                       "\"fraction_of_dense\": " + std::to_string(2.5 * f / (bwd64 * 1e9) / dense_tflops));
                cudaFree(dvec);
            }
            for (bf16* p : {q, k, v, o, dout, dq, dk, dv}) cudaFree(p);
            cudaFree(lse);
        }
    }
    // ======== end of attention ========

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
    // ---- Muon at the paper's parameter set (bench/bench_gpu_muon.cuh)
    bench_muon(be, st, quick);
    // ---- GaLore at the paper's parameter set (bench/gpu_galore_bench.cpp)
    be.synchronize();
    skew::bench::bench_galore(st, quick, [](const std::string& name, double ms, double flops, double bytes,
                                            const std::string& extra) { report(name, ms, flops, bytes, extra); });
    be.synchronize();
    if (g_out) std::fclose(g_out);
    std::printf("bench_gpu_ops: done\n");
    return 0;
}
