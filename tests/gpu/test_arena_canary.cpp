// The arena's test mode on the GPU (engine/arena.h, layout_arena_guarded): the device arena laid out
// with a canary after every buffer, every buffer poisoned (0xFF: NaN as fp32 and bf16) except the
// optimizer state (zero). One training step of configs/tiny.yaml with every optimizer the CUDA
// backend runs must leave the losses, every weight, gradient and state finite (no kernel read memory
// nobody wrote) and every canary intact (no kernel wrote past its buffer). Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_cuda.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/test_paths.h"

using namespace skew;
using namespace skew::test;

namespace {
std::string tiny_yaml() { return skew::test::source_path("configs/tiny.yaml"); }

// Non-finite fp32 / bf16 elements of buffer i of a host arena.
int64_t nonfinite_in(const Arena& a, int i) {
    const BufferSpec& b = a.plan->buffers[size_t(i)];
    int64_t bad = 0;
    if (b.dtype == DType::F32) {
        const auto* p = static_cast<const float*>(a.ptr(i));
        for (int64_t j = 0; j < b.numel(); ++j) bad += !std::isfinite(p[j]);
    } else if (b.dtype == DType::BF16) {
        const auto* p = static_cast<const bf16*>(a.ptr(i));
        for (int64_t j = 0; j < b.numel(); ++j) bad += !std::isfinite(bf16_to_f32(p[j]));
    }
    return bad;
}
}  // namespace

TEST_CASE("gpu: one step of every CUDA optimizer on a poisoned, canaried device arena", "[gpu][arena]") {
    SKEW_REQUIRE_GPU();
    const Config cfg = load_config(tiny_yaml(), {"runtime.grad_dtype=fp32", "runtime.backend=cuda"});
    const ParamTable table = build_param_table(cfg.model);
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
    std::vector<int32_t> stream(size_t(cfg.train.batch_size * T + 1));
    for (size_t i = 0; i < stream.size(); ++i) stream[i] = int32_t((i * 7919 + 17) % uint64_t(cfg.model.vocab_size));
    cuda::CudaBackend& dev = gpu();
    for (const char* name : {"skewadam", "adamw", "lion", "muon", "adafactor"}) {
        INFO("optimizer " << name);
        const OptimizerConfig opt = builtin_optimizer(name);
        MemoryPlan plan = build_memory_plan(cfg, table, opt, mb);
        layout_arena_guarded(plan);
        // the device arena gets the guarded host arena's bytes: canaries, poison, zero state
        Arena ref = allocate_host_arena_guarded(plan);
        Arena arena = allocate_arena(plan, gpu());
        dev.copy_to_device(arena.base, ref.base, plan.peak_bytes);
        Model model = model_bind(cfg, table, arena, dev);
        const int si = plan.find("ws.cuda_scratch"), wi = plan.find("ws.cuda_widen"), oi = plan.find("ws.optimizer");
        REQUIRE(si >= 0);
        REQUIRE(wi >= 0);
        REQUIRE(oi >= 0);
        dev.set_scratch(arena.ptr(si), plan.buffers[size_t(si)].bytes());
        dev.set_matmul_widen_buffer(static_cast<float*>(arena.ptr(wi)), plan.buffers[size_t(wi)].numel());
        model_init(model, uint64_t(cfg.train.seed));
        model_zero_grads(model);
        double loss = 0;
        for (int64_t m = 0; m < accum; ++m) {
            const int32_t* x = stream.data() + m * mb * T;
            loss += model_forward_backward(model, x, x + 1, m, 1, accum, true).total;
        }
        const double norm = model_clip_gradients(model, cfg.train.grad_clip);
        std::vector<ParamSlot> slots = arena_param_slots(opt, table, arena);
        CudaOptimContext ctx;
        ctx.stream = dev.stream();
        REQUIRE(cublasCreate(&ctx.cublas) == CUBLAS_STATUS_SUCCESS);
        cublasSetStream(ctx.cublas, ctx.stream);
        ctx.scratch = arena.ptr(oi);
        ctx.scratch_bytes = plan.buffers[size_t(oi)].bytes();
        for (int t = 1; t <= 2; ++t) optimizer_step_cuda(opt, slots, OptimStep{t, opt.lr, 42}, ctx);
        dev.synchronize();
        cublasDestroy(ctx.cublas);
        dev.set_scratch(nullptr, 0);
        dev.set_matmul_widen_buffer(nullptr, 0);
        // the whole device arena back into the guarded host arena, checked there
        dev.copy_to_host(ref.base, arena.base, plan.peak_bytes);
        CHECK(std::isfinite(loss));
        CHECK(std::isfinite(norm));
        for (size_t i = 0; i < plan.buffers.size(); ++i) {
            const BufferSpec& b = plan.buffers[i];
            if (b.kind != BufferKind::WEIGHT && b.kind != BufferKind::GRAD && b.kind != BufferKind::STATE) continue;
            INFO("buffer " << b.name);
            CHECK(nonfinite_in(ref, int(i)) == 0);
        }
        const auto broken = arena_broken_canaries(ref);
        INFO("canaries overwritten after: " << (broken.empty() ? "none" : broken.front()));
        CHECK(broken.empty());
    }
}
