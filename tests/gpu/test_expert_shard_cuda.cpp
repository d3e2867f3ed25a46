// The CUDA optimizer step on an expert-parallel shard of a bank (docs/distributed.md, "Expert
// parallel"): experts [2, 4) of a bank of 4 held as their own (2, rows, cols) tensor with
// ParamInfo::expert_offset 2 are stepped on the device and compared with the CPU step of the whole
// bank: the rounding noise is keyed by the global element index (the write-back's element_base),
// so AdamW and Lion (elementwise, the same fp32 operations on both backends) agree bit for bit and
// SkewAdam within the CPU/CUDA twin tolerance (one bf16 ulp in at most 0.2% of the weights).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>

#include "engine/config.h"
#include "kernels/common/philox.h"
#include "optim/optimizer_cuda.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using namespace skew::test;

TEST_CASE("CUDA step of an expert-parallel shard equals the CPU step of the whole bank on those experts") {
    SKEW_REQUIRE_GPU();
    constexpr int64_t E = 4, ROWS = 32, COLS = 40, PER = ROWS * COLS, FIRST = 2, HELD = 2;
    for (const std::string name : {"adamw", "lion", "skewadam"}) {
        INFO(name);
        OptimizerConfig opt = builtin_optimizer(name);
        opt.rounding = Rounding::STOCHASTIC;
        TensorSet whole;
        whole.add(
            make_param("blocks.1.moe.experts.w1", {E, ROWS, COLS}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 3));
        whole.bind(opt);
        for (int64_t i = 0; i < E * PER; ++i)
            whole.set_weight(0, i, 0.05f * philox_normal(PhiloxKey{3, 1}, 0, 0, uint64_t(i)));
        ParamInfo shard = whole.infos[0];
        shard.shape = {HELD, ROWS, COLS};
        shard.expert_offset = FIRST;
        std::vector<uint16_t> w(whole.w16[0].begin() + FIRST * PER, whole.w16[0].begin() + (FIRST + HELD) * PER);
        void *dw = nullptr, *dg = nullptr, *scratch = nullptr;
        cuda_check(cudaMalloc(&dw, w.size() * 2));
        cuda_check(cudaMalloc(&dg, size_t(HELD * PER) * 4));
        cuda_check(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
        ParamSlot s;
        s.info = &shard;
        s.weight = dw;
        s.grad = dg;
        s.grad_dtype = DType::F32;
        std::vector<void*> states;
        for (const StateSlotSpec& spec : optimizer_param_state(opt, shard)) {
            void* p = nullptr;
            cuda_check(cudaMalloc(&p, size_t(spec.numel()) * 4));
            cuda_check(cudaMemset(p, 0, size_t(spec.numel()) * 4));
            s.state[size_t(spec.kind)] = static_cast<float*>(p);
            states.push_back(p);
        }
        CudaOptimContext ctx;
        ctx.scratch_bytes =
            std::max<int64_t>(optimizer_cuda_scratch_bytes(opt, std::span<const ParamSlot>(&s, 1)), 256);
        cuda_check(cudaMalloc(&scratch, size_t(ctx.scratch_bytes)));
        ctx.scratch = scratch;
        for (int t = 1; t <= 3; ++t) {
            for (int64_t i = 0; i < E * PER; ++i)
                whole.grads[0][size_t(i)] = 0.01f * philox_normal(PhiloxKey{3, 2}, uint32_t(t), 0, uint64_t(i));
            cuda_check(
                cudaMemcpy(dg, whole.grads[0].data() + FIRST * PER, size_t(HELD * PER) * 4, cudaMemcpyHostToDevice));
            OptimStep st{t, 1e-2, 42};
            optimizer_step(opt, whole.slots, st);
            ParamSlot one = s;
            optimizer_step_cuda(opt, std::span<ParamSlot>(&one, 1), st, ctx);
        }
        cuda_check(cudaMemcpy(w.data(), dw, w.size() * 2, cudaMemcpyDeviceToHost));
        int64_t differ = 0, beyond_ulp = 0;
        for (int64_t i = 0; i < HELD * PER; ++i) {
            const float a = bf16_to_f32(bf16{w[size_t(i)]}), b = whole.weight(0, FIRST * PER + i);
            if (a != b) ++differ;
            int e;
            std::frexp(std::fmax(std::fabs(a), std::fabs(b)), &e);
            if (std::fabs(a - b) > std::ldexp(1.0f, e - 8) * 1.01f) ++beyond_ulp;
        }
        INFO(differ << " of " << HELD * PER << " weights differ");
        CHECK(beyond_ulp == 0);
        if (name != "skewadam") CHECK(differ == 0);
        else CHECK(double(differ) <= 0.002 * double(HELD * PER) + 2);
        for (void* p : states) cudaFree(p);
        cudaFree(dw);
        cudaFree(dg);
        cudaFree(scratch);
    }
}
