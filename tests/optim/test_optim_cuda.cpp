// CPU/CUDA twin test of the optimizer step (docs/design.md "Every CUDA kernel has a CPU twin"): three
// steps of each optimizer on the same small model on both backends. Tolerance: bf16 weights within
// 1 ulp, fp32 weights and state |d| <= 1e-4|x| + 1e-5 max|x| (reduction order differs). Runs only
// where a GPU is present; elsewhere it passes with a warning (the CUDA code is compile-checked).
#include <catch2/catch.hpp>

#if defined(SKEW_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>

#include "engine/config.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/device_info.h"
#include "optim/optimizer_cuda.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using test::make_param;
using test::TensorSet;

namespace {

float g_at(uint32_t t, uint64_t i, float s) { return s * philox_normal(PhiloxKey{5, 77}, 0, t, i); }

TensorSet twin_model() {
    TensorSet ts;
    ts.add(make_param("q", {48, 40}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    ts.add(make_param("ln", {40}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 1));
    ts.add(make_param("experts", {3, 32, 40}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 2));
    ts.add(make_param("router", {4, 40}, DType::F32, Tier::ROUTER, Role::ROUTER, 3));
    return ts;
}

float ulp(float x) {
    int e;
    std::frexp(std::fabs(x), &e);
    return std::ldexp(1.0f, e - 8);
}

}  // namespace

TEST_CASE("CUDA optimizer step matches the CPU step") {
    if (cuda::device_count() == 0) {
        WARN("no GPU: the CUDA optimizer twin test is skipped (the kernels are compile-checked only)");
        return;
    }
    cublasHandle_t handle;
    REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    for (const char* name : {"skewadam", "uniform", "skewadam-factored-router", "adamw", "lion", "adafactor", "muon",
                             "muon-kj"}) {
        for (Rounding mode : {Rounding::NEAREST, Rounding::STOCHASTIC}) {
            INFO(name << " rounding " << rounding_name(mode));
            OptimizerConfig opt = builtin_optimizer(name);
            opt.rounding = mode;
            TensorSet cpu = twin_model();
            cpu.bind(opt);
            for (size_t t = 0; t < cpu.infos.size(); ++t)
                for (int64_t i = 0; i < cpu.infos[t].numel(); ++i) cpu.set_weight(t, i, g_at(uint32_t(t), uint64_t(i), 0.5f));
            // Device copies of weights, grads and state.
            std::vector<void*> allocs;
            auto dev_copy = [&](const void* src, size_t bytes) {
                void* p = nullptr;
                REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess);
                REQUIRE(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
                allocs.push_back(p);
                return p;
            };
            std::vector<ParamSlot> gpu = cpu.slots;
            for (size_t t = 0; t < gpu.size(); ++t) {
                const ParamInfo& p = cpu.infos[t];
                gpu[t].weight = dev_copy(cpu.slots[t].weight, size_t(p.bytes()));
                gpu[t].grad = dev_copy(cpu.grads[t].data(), cpu.grads[t].size() * 4);
                for (const StateSlotSpec& s : optimizer_param_state(opt, p))
                    gpu[t].state[size_t(s.kind)] =
                        static_cast<float*>(dev_copy(cpu.slots[t].st(s.kind), size_t(s.numel()) * 4));
            }
            CudaOptimContext ctx;
            ctx.scratch_bytes = optimizer_cuda_scratch_bytes(opt, gpu);
            REQUIRE(cudaMalloc(&ctx.scratch, size_t(std::max<int64_t>(ctx.scratch_bytes, 256))) == cudaSuccess);
            ctx.cublas = handle;
            for (int step = 1; step <= 3; ++step) {
                for (size_t t = 0; t < cpu.infos.size(); ++t) {
                    for (int64_t i = 0; i < cpu.infos[t].numel(); ++i)
                        cpu.grads[t][size_t(i)] = g_at(uint32_t(10 * step + t), uint64_t(i), 0.01f);
                    REQUIRE(cudaMemcpy(const_cast<void*>(gpu[t].grad), cpu.grads[t].data(), cpu.grads[t].size() * 4,
                                       cudaMemcpyHostToDevice) == cudaSuccess);
                }
                OptimStep st{step, 1e-3 * step, 42};
                optimizer_step(opt, cpu.slots, st);
                optimizer_step_cuda(opt, gpu, st, ctx);
            }
            REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
            // Purely elementwise updates use no reductions: CPU and GPU must agree bit for bit
            // (no FMA contraction, IEEE sqrt and division, the same Philox words).
            const bool exact = std::string(name) == "adamw" || std::string(name) == "lion";
            for (size_t t = 0; t < cpu.infos.size(); ++t) {
                const ParamInfo& p = cpu.infos[t];
                INFO("tensor " << p.name);
                std::vector<char> w(size_t(p.bytes()));
                REQUIRE(cudaMemcpy(w.data(), gpu[t].weight, w.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
                for (int64_t i = 0; i < p.numel(); ++i) {
                    float a, b = cpu.weight(t, i);
                    if (p.dtype == DType::BF16) {
                        uint16_t h;
                        std::memcpy(&h, w.data() + 2 * i, 2);
                        a = bf16_to_f32(bf16{h});
                        CHECK(std::fabs(a - b) <= ulp(std::fmax(std::fabs(a), std::fabs(b))) * 1.01f);
                        if (exact) CHECK(a == b);
                    } else {
                        std::memcpy(&a, w.data() + 4 * i, 4);
                        CHECK(std::fabs(a - b) <= 1e-4f * std::fabs(b) + 1e-5f);
                        if (exact) CHECK(a == b);
                    }
                }
                for (const StateSlotSpec& s : optimizer_param_state(opt, p)) {
                    std::vector<float> have(size_t(s.numel()));
                    REQUIRE(cudaMemcpy(have.data(), gpu[t].st(s.kind), have.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
                    const float* want = cpu.slots[t].st(s.kind);
                    double mx = 0;
                    for (int64_t i = 0; i < s.numel(); ++i) mx = std::fmax(mx, std::fabs(double(want[i])));
                    for (int64_t i = 0; i < s.numel(); ++i) {
                        CHECK(std::fabs(double(have[size_t(i)]) - double(want[i])) <= 1e-4 * std::fabs(double(want[i])) + 1e-5 * mx);
                        if (exact) CHECK(have[size_t(i)] == want[i]);
                    }
                }
            }
            for (void* p : allocs) cudaFree(p);
            cudaFree(ctx.scratch);
        }
    }
    cublasDestroy(handle);
}

#else
TEST_CASE("CUDA optimizer step matches the CPU step") { WARN("built without CUDA: skipped"); }
#endif
