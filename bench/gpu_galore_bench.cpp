// GaLore's CUDA step at the paper's parameter set (bench/gpu_galore_bench.h). Synthetic bf16
// weights and gradients of the exact shapes (configs/paper-6.78b.yaml); projectors filled with
// random values (a refresh is timed separately: it is host work). GEMM floor: the step's projection
// FLOPs (paper form 4mnr + 4mr^2, reference form 4mnr per matrix) at the fp32 SGEMM rate measured
// here on an m x r x n product, plus the memory floor of its passes (not added: reported apart).
#include "bench/gpu_galore_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "engine/config.h"
#include "kernels/cuda/cuda_check.h"
#include "optim/galore_cuda.h"
#include "optim/optim_internal.h"
#include "optim/optimizer_cuda.h"
#include "optim/state_plan.h"

namespace skew::bench {

namespace {

ParamInfo param(const std::string& name, std::vector<int64_t> shape, Tier tier, Role role, uint32_t index) {
    ParamInfo p;
    p.name = name;
    p.shape = std::move(shape);
    p.dtype = DType::BF16;
    p.tier = tier;
    p.role = role;
    p.index = index;
    return p;
}

void* dalloc_filled(size_t bytes, float amp, bool bf16_values, uint32_t seed) {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
    if (amp == 0.0f) {
        cuda_check(cudaMemset(p, 0, std::max<size_t>(bytes, 16)));
        return p;
    }
    std::mt19937 gen(seed);
    std::normal_distribution<float> nd(0.0f, amp);
    const size_t chunk = size_t(1) << 20;  // a 1M-element slab repeated (fast to generate, small on the host)
    if (bf16_values) {
        std::vector<uint16_t> h(std::min(chunk, bytes / 2));
        for (auto& x : h) x = f32_to_bf16(nd(gen)).bits;
        for (size_t off = 0; off < bytes / 2; off += h.size())
            cuda_check(cudaMemcpy(static_cast<uint16_t*>(p) + off, h.data(), std::min(h.size(), bytes / 2 - off) * 2,
                                  cudaMemcpyHostToDevice));
    } else {
        std::vector<float> h(std::min(chunk, bytes / 4));
        for (auto& x : h) x = nd(gen);
        for (size_t off = 0; off < bytes / 4; off += h.size())
            cuda_check(cudaMemcpy(static_cast<float*>(p) + off, h.data(), std::min(h.size(), bytes / 4 - off) * 4,
                                  cudaMemcpyHostToDevice));
    }
    return p;
}

template <class F>
double time_ms(cudaStream_t st, F&& fn, int iters) {
    fn();
    cudaEvent_t a, b;
    cuda_check(cudaEventCreate(&a));
    cuda_check(cudaEventCreate(&b));
    cuda_check(cudaEventRecord(a, st));
    for (int i = 0; i < iters; ++i) fn();
    cuda_check(cudaEventRecord(b, st));
    cuda_check(cudaEventSynchronize(b));
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return double(ms) / iters;
}

}  // namespace

void bench_galore(cudaStream_t st, bool quick, const ReportFn& report) {
    const int64_t C = 4096, F = 4096, KVD = 1024, E = 128, Vp = 50304, T = 256, r = 128;
    cublasHandle_t h;
    cublas_check(cublasCreate(&h));
    cublas_check(cublasSetStream(h, st));
    // fp32 SGEMM rate on the projection's shape: (4096 x 4096) x (4096 x 128).
    double sgemm_tflops = 0;
    {
        float* A = static_cast<float*>(dalloc_filled(size_t(C * C) * 4, 1.0f, false, 1));
        float* B = static_cast<float*>(dalloc_filled(size_t(C * r) * 4, 1.0f, false, 2));
        float* D = static_cast<float*>(dalloc_filled(size_t(C * r) * 4, 1.0f, false, 3));
        const float one = 1.0f, zero = 0.0f;
        const double f = 2.0 * double(C) * double(C) * double(r);
        const double ms = time_ms(
            st,
            [&] {
                cublas_check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, int(r), int(C), int(C), &one, B, int(r), A,
                                         int(C), &zero, D, int(r)));
            },
            quick ? 5 : 20);
        sgemm_tflops = f / (ms * 1e-3) / 1e12;
        report("sgemm fp32 4096x4096x128 (galore ceiling)", ms, f, 0, "");
        cudaFree(A);
        cudaFree(B);
        cudaFree(D);
    }
    for (const char* type : {"galore-paper", "galore"}) {
        OptimizerConfig opt = builtin_optimizer(type);
        opt.rank = r;
        const bool paper = opt.type == OptimizerType::GALORE_PAPER;
        std::vector<ParamInfo> ps;
        uint32_t idx = 0;
        ps.push_back(param("wte", {Vp, C}, Tier::BACKBONE, Role::TOKEN_EMBEDDING, idx++));
        ps.push_back(param("wpe", {T, C}, Tier::BACKBONE, Role::POSITION_EMBEDDING, idx++));
        for (int b = 0; b < 2; ++b) {
            ps.push_back(param("q", {C, C}, Tier::BACKBONE, Role::ATTN_Q, idx++));
            ps.push_back(param("k", {KVD, C}, Tier::BACKBONE, Role::ATTN_K, idx++));
            ps.push_back(param("v", {KVD, C}, Tier::BACKBONE, Role::ATTN_V, idx++));
            ps.push_back(param("o", {C, C}, Tier::BACKBONE, Role::ATTN_O, idx++));
        }
        ps.push_back(param("w1", {F, C}, Tier::BACKBONE, Role::FFN_W1, idx++));
        ps.push_back(param("w2", {F, C}, Tier::BACKBONE, Role::FFN_W2, idx++));
        ps.push_back(param("w3", {C, F}, Tier::BACKBONE, Role::FFN_W3, idx++));
        ps.push_back(param("router", {E, C}, Tier::ROUTER, Role::ROUTER, idx++));
        ps.push_back(param("experts.w1", {E, F, C}, Tier::EXPERTS, Role::EXPERT_W1, idx++));
        ps.push_back(param("experts.w2", {E, F, C}, Tier::EXPERTS, Role::EXPERT_W2, idx++));
        ps.push_back(param("experts.w3", {E, C, F}, Tier::EXPERTS, Role::EXPERT_W3, idx++));
        std::vector<ParamSlot> slots;
        std::vector<void*> allocs;
        double flops = 0, bytes = 0;
        int64_t scratch = 0;
        for (ParamInfo& p : ps) {
            p.dtype = p.role == Role::ROUTER ? DType::F32 : DType::BF16;
            const ParamPolicy pol = param_policy(opt, p);
            if (!pol.galore_project) continue;  // only the projected matrices are timed
            ParamSlot s;
            s.info = &p;
            s.weight = dalloc_filled(size_t(p.bytes()), 0.02f, p.dtype == DType::BF16, idx++);
            s.grad = dalloc_filled(size_t(p.numel()) * 2, 0.01f, true, idx++);
            s.grad_dtype = DType::BF16;
            allocs.push_back(s.weight);
            allocs.push_back(const_cast<void*>(s.grad));
            for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
                // Projectors random (non-zero: no refresh), moments zero.
                const bool proj = spec.kind == StateKind::GALORE_P || spec.kind == StateKind::GALORE_Q;
                void* q = dalloc_filled(size_t(spec.numel()) * 4, proj ? 0.02f : 0.0f, false, idx++);
                allocs.push_back(q);
                s.state[size_t(spec.kind)] = static_cast<float*>(q);
            }
            slots.push_back(s);
            const optim_detail::MatrixShape ms = optim_detail::matrix_shape(p);
            const double m = double(ms.rows), n = double(ms.cols), rr = double(pol.galore_rank);
            flops += double(ms.count) * (paper ? 4 * m * n * rr + 4 * m * rr * rr : 4 * m * n * rr);
            // G read (2 B), widened (4 B w + 4 B r), back-projection written and read (8 B), W r/w (4 B)
            bytes += double(p.numel()) * 22.0;
            scratch = std::max(scratch, cuda_optimizer_tensor_scratch_bytes(opt, p));
        }
        CudaOptimContext ctx;
        ctx.scratch_bytes = scratch;
        cuda_check(cudaMalloc(&ctx.scratch, size_t(scratch)));
        ctx.cublas = h;
        ctx.stream = st;
        int64_t t = 2;  // past the reference form's refresh at t = 1 (update_proj_gap 200)
        const double ms = time_ms(
            st,
            [&] {
                optimizer_step_cuda(opt, slots, OptimStep{t++, 3e-4, 42}, ctx);
            },
            quick ? 1 : 3);
        const double floor_ms = flops / (sgemm_tflops * 1e12) * 1e3;
        report(std::string(type) + " step paper params (no refresh)", ms, flops, bytes,
               "\"sgemm_tflops\": " + std::to_string(sgemm_tflops) + ", \"gemm_floor_ms\": " +
                   std::to_string(floor_ms) + ", \"x_gemm_floor\": " + std::to_string(ms / floor_ms) +
                   ", \"scratch_mib\": " + std::to_string(scratch >> 20));
        // One projector refresh on the host: the paper form's randomized SVD of a 4096 x 4096 expert
        // matrix; the reference form's exact SVD of a 1024 x 4096 attention matrix (a 4096 x 4096 one
        // takes tens of seconds on the host: about (4096/1024)^2..3 times this).
        {
            const ParamInfo* pp = slots.back().info;
            for (const ParamSlot& sl : slots)
                if (!paper && sl.info->role == Role::ATTN_K) pp = sl.info;
            const ParamInfo& p = *pp;
            const ParamPolicy pol = param_policy(opt, p);
            const int64_t rows = p.shape[p.shape.size() - 2];
            std::vector<float> g(size_t(rows * C)), pe(size_t(std::max(rows, C) * r)), qe(size_t(C * r));
            std::mt19937 gen(7);
            std::normal_distribution<float> nd(0.0f, 0.01f);
            for (auto& x : g) x = nd(gen);
            const auto t0 = std::chrono::steady_clock::now();
            optim_detail::galore_projector(opt, pol, p, OptimStep{1, 3e-4, 42}, 0, g.data(), pe.data(), qe.data());
            const double host_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            report(std::string(type) + " projector refresh of one " + std::to_string(rows) + "x4096 matrix (host)",
                   host_ms, 0, 0, "\"matrices_per_refresh\": " + std::to_string(paper ? 3 * E + 14 : 3 * E + 11));
        }
        cudaFree(ctx.scratch);
        for (void* p : allocs) cudaFree(p);
    }
    cublasDestroy(h);
}

}  // namespace skew::bench
