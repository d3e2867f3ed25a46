// GPU micro-benchmarks of the CUDA backend (built and run by bench/gpu_check.sh; JSON lines):
// the optimizer steps at the paper's parameter set (bench/bench_gpu_optim.cu), every Backend op's
// perf row of the op table at the paper's shapes (tests/backend_ops via bench/gpu_table_bench.cpp:
// time, TFLOP/s, GB/s, fraction of the roofline measured in the same run; the grouped expert GEMM
// under both algorithms), the attention kernels at their other key tile (called below the Backend,
// which picks one), and Muon's and GaLore's steps (bench/bench_gpu_muon.cuh,
// bench/gpu_galore_bench.cpp). The paper's shapes: docs/design.md (d_model 4096, 32/8 heads of 128,
// 128 experts top-2, hidden 4096, batch 64 x 128, vocabulary 50,304).
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

#include "bench/bench_gpu_optim.h"
#include "bench/gpu_galore_bench.h"
#include "bench/gpu_table_bench.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cross_entropy.h"
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

    // ---- every Backend op's perf row of the op table (bench/gpu_table_bench.cpp)
    int failures = 0;
    try {
        failures += bench::bench_table(g_out, quick);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu_ops: op table section failed: %s\n", e.what());
        ++failures;
    }

    // ---- attention at the key tile the Backend does not pick (kernels/cuda/attention_kernels.h):
    // which tile the public entry points use is decided from these figures against the table's
    // attention rows. Causal FLOPs as the table counts them; "without D": the dK/dV and dQ kernels
    // alone (the public backward also forms D = rowsum(dO∘O) first).
    const int64_t H = 32, KV = 8, D = 128;
    struct AttnCase {
        int64_t batch, seq_len;
    };
    for (const AttnCase c : {AttnCase{64, 128}, AttnCase{16, 1024}, AttnCase{4, 4096}}) {
        const AttentionShape s{c.batch, c.seq_len, H, KV, D};
        const int64_t nq = c.batch * c.seq_len * H * D, nkv = c.batch * c.seq_len * KV * D;
        bf16* q = random_bf16(nq, 7);
        bf16* k = random_bf16(nkv, 8);
        bf16* v = random_bf16(nkv, 9);
        bf16* o = random_bf16(nq, 10);
        bf16* dout = random_bf16(nq, 14);
        bf16* dq = random_bf16(nq, 11);
        bf16* dk = random_bf16(nkv, 12);
        bf16* dv = random_bf16(nkv, 13);
        float* lse = static_cast<float*>(dalloc(static_cast<size_t>(c.batch * H * c.seq_len) * 4));
        float* dvec = static_cast<float*>(dalloc(static_cast<size_t>(c.batch * H * c.seq_len) * 4));
        be.attention_forward(o, lse, q, k, v, s);  // a real out and lse for the backward
        const double f = 4.0 * double(c.batch * H) * double(c.seq_len) * double(c.seq_len + 1) / 2.0 * double(D);
        char tag_buf[64];
        std::snprintf(tag_buf, sizeof tag_buf, "(%lldx%lld, 32/8 heads, d %lld)", static_cast<long long>(c.batch),
                      static_cast<long long>(c.seq_len), static_cast<long long>(D));
        const std::string tag = tag_buf;
        if (cuda::attention_uses_tensor_cores(q, k, v, o, s)) {
            report("attention forward key tile 32 " + tag,
                   time_ms(
                       st, [&] { cuda::attention_forward_mma(o, lse, q, k, v, s, st, 32); }, iters),
                   f, 0);
            for (const int tile : {32, 64})
                report("attention backward key tile " + std::to_string(tile) + ", without D " + tag,
                       time_ms(
                           st, [&] { cuda::attention_backward_mma(dq, dk, dv, dout, q, k, v, lse, dvec, s, st, tile); },
                           iters),
                       2.5 * f, 0);
        }
        for (bf16* p : {q, k, v, o, dout, dq, dk, dv}) cudaFree(p);
        cudaFree(lse);
        cudaFree(dvec);
    }
    // ---- Muon at the paper's parameter set (bench/bench_gpu_muon.cuh)
    bench_muon(be, st, quick);
    // ---- GaLore at the paper's parameter set (bench/gpu_galore_bench.cpp)
    be.synchronize();
    skew::bench::bench_galore(
        st, quick, [](const std::string& name, double ms, double flops, double bytes, const std::string& extra) {
            report(name, ms, flops, bytes, extra);
        });
    be.synchronize();
    if (g_out) std::fclose(g_out);
    std::printf("bench_gpu_ops: done%s\n", failures ? " (some op table rows failed)" : "");
    return failures ? 1 : 0;
}
