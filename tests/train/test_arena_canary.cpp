// The arena's test mode (engine/arena.h, allocate_host_arena_guarded): every buffer poisoned (NaN
// for fp32 and bf16) except optimizer state (zero, its documented start), a canary after every
// buffer. One training step of every built-in optimizer on the CPU must leave the loss, every
// weight, gradient and state finite (no op read memory nobody wrote) and every canary intact (no op
// wrote past its buffer).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "kernels/common/bf16.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "plan/plan.h"

using namespace skew;

namespace {
// configs/tiny.yaml's shapes with a small vocabulary, 2 microbatches of 2 x 16.
const char* CANARY_YAML = R"(
model:
  vocab_size: 500
  padded_vocab_size: 512
  d_model: 64
  n_blocks: 2
  moe_blocks: [1]
  n_heads: 4
  n_kv_heads: 2
  d_ff: 128
  max_seq_len: 32
  n_experts: 8
  d_expert: 64
  top_k: 2
train:
  batch_size: 4
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
)";

// Non-finite elements of a buffer (fp32, bf16; integer buffers are not checked).
int64_t count_nonfinite(const Arena& a, int i) {
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

TEST_CASE("the guarded arena is poisoned, keeps state zero and detects a write one byte past a buffer") {
    const Config cfg = load_config_text(CANARY_YAML, "test.yaml");
    const ParamTable table = build_param_table(cfg.model);
    MemoryPlan plan = build_memory_plan(cfg, table, builtin_optimizer("adamw"), 2);
    layout_arena_guarded(plan);
    Arena arena = allocate_host_arena_guarded(plan);
    const int w = plan.find("weight." + table.params[0].name);
    int st = -1;
    for (size_t i = 0; i < plan.buffers.size() && st < 0; ++i)
        if (plan.buffers[i].kind == BufferKind::STATE) st = int(i);
    REQUIRE(w >= 0);
    REQUIRE(st >= 0);
    CHECK(std::isnan(bf16_to_f32(*static_cast<const bf16*>(arena.ptr(w)))));
    CHECK(count_nonfinite(arena, w) == plan.buffers[size_t(w)].numel());
    CHECK(count_nonfinite(arena, st) == 0);
    CHECK(arena_broken_canaries(arena).empty());
    static_cast<char*>(arena.ptr(w))[plan.buffers[size_t(w)].bytes()] = 0;  // one byte too far
    const auto broken = arena_broken_canaries(arena);
    REQUIRE(broken.size() == 1);
    CHECK(broken[0] == "weight." + table.params[0].name);
}

TEST_CASE(
    "one step of every optimizer on a poisoned, canaried arena reads only written memory and writes only its slots") {
    const Config cfg = load_config_text(CANARY_YAML, "test.yaml");
    const ParamTable table = build_param_table(cfg.model);
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
    std::vector<int32_t> x(size_t(cfg.train.batch_size * T)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = int32_t((i * 7919 + 13) % 500);
        y[i] = int32_t((i * 104729 + 5) % 500);
    }
    for (const std::string& name : builtin_optimizer_names()) {
        INFO("optimizer " << name);
        const OptimizerConfig opt = builtin_optimizer(name);
        MemoryPlan plan = build_memory_plan(cfg, table, opt, mb);
        layout_arena_guarded(plan);
        Arena arena = allocate_host_arena_guarded(plan);
        auto backend = make_cpu_backend();
        Model model = model_bind(cfg, table, arena, *backend);
        model_init(model, 42);
        model_zero_grads(model);
        double loss = 0;
        for (int64_t m = 0; m < accum; ++m)
            loss +=
                model_forward_backward(model, x.data() + m * mb * T, y.data() + m * mb * T, m, 1, accum, true).total;
        const double norm = model_clip_gradients(model, 1.0);
        std::vector<ParamSlot> slots = arena_param_slots(opt, table, arena);
        for (int t = 1; t <= 2; ++t) optimizer_step(opt, slots, OptimStep{t, 1e-3, 42});
        CHECK(std::isfinite(loss));
        CHECK(std::isfinite(norm));
        for (size_t i = 0; i < plan.buffers.size(); ++i) {
            const BufferSpec& b = plan.buffers[i];
            if (b.kind != BufferKind::WEIGHT && b.kind != BufferKind::GRAD && b.kind != BufferKind::STATE) continue;
            INFO("buffer " << b.name);
            CHECK(count_nonfinite(arena, int(i)) == 0);
        }
        const auto broken = arena_broken_canaries(arena);
        INFO("canaries overwritten after: " << (broken.empty() ? "none" : broken.front()));
        CHECK(broken.empty());
    }
}
