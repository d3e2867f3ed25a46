// bench_gpu_ops section: one Muon step at the paper's parameter set (configs/paper-6.78b.yaml:
// d_model 4096, 2 blocks, block 0 dense SwiGLU d_ff 4096, block 1 128 experts of 4096 x 4096 x 3,
// GQA 32/8 of 128), synthetic bf16 weights and gradients of the exact shapes, ns_steps 3 and 5,
// against a dense 4096^3 bf16 GEMM timed in the same run. Newton-Schulz FLOPs of an a x b matrix
// (a <= b): steps * (4 a^2 b + 2 a^3) (X X^T, A A, B X). Included by bench_gpu_ops.cu after its
// helpers (dalloc, random_bf16, time_ms, report).
#pragma once
#include "kernels/cuda/muon.h"

namespace {

struct MuonBenchTensor {
    const char* name;
    int64_t n_mat, rows, cols;
};

double muon_ns_flops(const MuonBenchTensor& t, int64_t steps) {
    const double a = double(std::min(t.rows, t.cols)), b = double(std::max(t.rows, t.cols));
    return double(t.n_mat) * double(steps) * (4.0 * a * a * b + 2.0 * a * a * a);
}

void bench_muon(cuda::CudaBackend& be, cudaStream_t st, bool quick) {
    const int64_t C = 4096, F = 4096, KVD = 8 * 128, E = 128;
    const std::vector<MuonBenchTensor> ts = {
        {"attn q (x2)", 2, C, C}, {"attn k (x2)", 2, KVD, C}, {"attn v (x2)", 2, KVD, C}, {"attn o (x2)", 2, C, C},
        {"ffn w1", 1, F, C},      {"ffn w2", 1, F, C},        {"ffn w3", 1, C, F},        {"experts w1", E, F, C},
        {"experts w2", E, F, C},  {"experts w3", E, C, F},
    };
    // Dense bf16 GEMM rate in this run (the ceiling the Newton-Schulz products read against).
    double dense_tflops = 0;
    {
        bf16* x = random_bf16(C * C, 101);
        bf16* w = random_bf16(C * C, 102);
        bf16* y = random_bf16(C * C, 103);
        const double f = 2.0 * double(C) * double(C) * double(C);
        const double ms = time_ms(
            st, [&] { be.matmul_forward(y, x, w, C, C, C); }, quick ? 3 : 20);
        dense_tflops = f / (ms * 1e-3) / 1e12;
        report("dense gemm bf16 4096^3 (muon ceiling)", ms, f, 0);
        cudaFree(x);
        cudaFree(w);
        cudaFree(y);
    }
    struct Dev {
        bf16* w;
        bf16* g;
        float* m;
    };
    std::vector<Dev> dev;
    int64_t scratch_bytes = 0;
    for (const auto& t : ts) {
        const int64_t n = t.n_mat * t.rows * t.cols;
        dev.push_back({random_bf16(n, 200 + uint32_t(dev.size()), 0.04f),
                       random_bf16(n, 300 + uint32_t(dev.size()), 0.01f), static_cast<float*>(dalloc(size_t(n) * 4))});
        scratch_bytes = std::max(scratch_bytes, cuda::muon_scratch_bytes(t.n_mat, t.rows, t.cols));
    }
    void* scratch = dalloc(size_t(scratch_bytes));
    for (int64_t steps : {int64_t(3), int64_t(5)}) {
        cuda::MuonArgs args;
        args.ns_steps = steps;
        cuda::OptimWrite w;
        w.rounding = 0;  // stochastic
        w.lr = 0.02f;
        w.seed = 42;
        w.step = 1;
        double flops = 0, bytes = 0;
        auto run_all = [&] {
            for (size_t i = 0; i < ts.size(); ++i) {
                cuda::OptimTensor t;
                t.weight = dev[i].w;
                t.grad = dev[i].g;
                t.n_mat = ts[i].n_mat;
                t.rows = ts[i].rows;
                t.cols = ts[i].cols;
                w.tensor = uint32_t(i);
                cuda::muon_step(t, dev[i].m, args, w, scratch, scratch_bytes, st);
            }
        };
        for (const auto& t : ts) {
            flops += muon_ns_flops(t, steps);
            // momentum pass (g 2 B, B 4+4 B), normalize (B 4 B, X 2 B), write (X 2 B, W 2+2 B)
            bytes += double(t.n_mat * t.rows * t.cols) * 22.0;
        }
        const double ms = time_ms(st, run_all, quick ? 1 : 3);
        const double tflops = flops / (ms * 1e-3) / 1e12;
        report("muon step paper params ns_steps " + std::to_string(steps), ms, flops, bytes,
               "\"dense_tflops\": " + std::to_string(dense_tflops) +
                   ", \"fraction_of_dense\": " + std::to_string(tflops / dense_tflops) +
                   ", \"floor_ms\": " + std::to_string(flops / (dense_tflops * 1e12) * 1e3) +
                   ", \"scratch_mib\": " + std::to_string(scratch_bytes >> 20));
        // One expert projection (128 matrices) alone: the batched NS at its best shape.
        const MuonBenchTensor& ex = ts[7];
        cuda::OptimTensor t;
        t.weight = dev[7].w;
        t.grad = dev[7].g;
        t.n_mat = ex.n_mat;
        t.rows = ex.rows;
        t.cols = ex.cols;
        const double ms1 = time_ms(
            st, [&] { cuda::muon_step(t, dev[7].m, args, w, scratch, scratch_bytes, st); }, quick ? 1 : 3);
        report(
            "muon one expert projection (128 x 4096^2) ns_steps " + std::to_string(steps), ms1,
            muon_ns_flops(ex, steps), double(ex.n_mat * ex.rows * ex.cols) * 22.0,
            "\"fraction_of_dense\": " + std::to_string(muon_ns_flops(ex, steps) / (ms1 * 1e-3) / 1e12 / dense_tflops));
    }
    for (auto& d : dev) {
        cudaFree(d.w);
        cudaFree(d.g);
        cudaFree(d.m);
    }
    cudaFree(scratch);
}

}  // namespace
