// Sessions: a model stood up on a backend (runtime/session.h).
#include "runtime/session.h"

#include <algorithm>
#include <utility>

#include "engine/error.h"
#include "model/activations.h"
#include "plan/plan.h"

namespace skew {

Session::~Session() {
    if (!backend) return;
    try {
        backend->synchronize();
        backend->bind_workspace(BackendWorkspaceMemory{});
    } catch (...) {}
}

Arena allocate_arena(const MemoryPlan& plan, Backend& backend) {
    if (!backend.device_memory()) return allocate_host_arena(plan);
    const std::string what =
        fmt::format("the {:.2f} GiB plan of optimizer '{}'", double(plan.peak_bytes) / GIB, plan.optimizer);
    char* base = static_cast<char*>(backend.allocate_device_memory(plan.peak_bytes, what));
    Backend* owner = &backend;
    return adopt_arena(plan, base, plan.peak_bytes, ArenaDevice::DEVICE,
                       [owner](char* p) { owner->free_device_memory(p); });
}

BackendWorkspaceMemory backend_workspace_memory(const Arena& arena) {
    BackendWorkspaceMemory ws;
    if (!arena.plan) return ws;
    const MemoryPlan& plan = *arena.plan;
    if (const int i = plan.find(ws_buffer::LIBRARY); i >= 0) {
        ws.library = arena.ptr(i);
        ws.library_bytes = plan.buffers[size_t(i)].bytes();
    }
    if (const int i = plan.find(ws_buffer::CUDA_SCRATCH); i >= 0) {
        ws.scratch = arena.ptr(i);
        ws.scratch_bytes = plan.buffers[size_t(i)].bytes();
    }
    if (const int i = plan.find(ws_buffer::CUDA_WIDEN); i >= 0) {
        ws.widen = static_cast<float*>(arena.ptr(i));
        ws.widen_elems = plan.buffers[size_t(i)].numel();
    }
    return ws;
}

namespace {

/// The inference plan: the training plan of `opt` for one microbatch without its optimizer state.
MemoryPlan inference_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, int64_t microbatch) {
    MemoryPlan plan = build_memory_plan(cfg, table, opt, microbatch);
    std::vector<BufferSpec> kept;
    for (const BufferSpec& b : plan.buffers)
        if (b.kind != BufferKind::STATE) kept.push_back(b);
    plan.buffers = kept;
    plan.offsets = layout_arena(plan.buffers, &plan.peak_bytes);
    plan.state_bytes = 0;
    return plan;
}

}  // namespace

std::unique_ptr<Session> open_session(const Config& cfg, Backend& backend, const SessionSpec& spec) {
    auto s = std::make_unique<Session>();
    s->cfg = cfg;
    s->table = spec.table ? *spec.table : build_param_table(cfg.model);
    const ParamTable& plan_table = spec.plan_table ? *spec.plan_table : s->table;
    if (spec.kind == SessionKind::TRAINING) {
        if (!spec.optimizer) fail("{}: a training session needs an optimizer", cfg.source);
        s->plan = build_memory_plan(s->cfg, plan_table, *spec.optimizer, spec.microbatch, spec.layout);
    } else {
        const OptimizerConfig adamw = builtin_optimizer("adamw");
        s->plan = inference_plan(s->cfg, plan_table, spec.optimizer ? *spec.optimizer : adamw, spec.microbatch);
    }
    if (spec.lm_head_chunk_tokens > 0) {
        BufferSpec& logits = s->plan.buffers[size_t(lm_head_logits_buffer(s->plan))];
        logits.shape = {std::min(spec.microbatch * cfg.train.seq_len, spec.lm_head_chunk_tokens) *
                        cfg.model.padded_vocab_size};
        s->plan.offsets = layout_arena(s->plan.buffers, &s->plan.peak_bytes);
    }
    s->arena = allocate_arena(s->plan, backend);
    s->model = model_bind(s->cfg, s->table, s->arena, backend);
    s->backend = &backend;  // from here the destructor releases the binding below
    backend.bind_workspace(backend_workspace_memory(s->arena));
    return s;
}

KvCache open_kv_cache(const Model& m, int64_t max_len) {
    const ModelConfig& c = m.cfg->model;
    if (max_len < 1 || max_len > c.max_seq_len)
        fail("inference: a KV cache of {} positions; the model has {} (model.max_seq_len)", max_len, c.max_seq_len);
    KvCache kc;
    kc.max_len = max_len;
    kc.plan = std::make_unique<MemoryPlan>();
    MemoryPlan& plan = *kc.plan;
    plan.optimizer = "kv-cache";
    plan.microbatch = 1;
    plan.seq_len = max_len;
    plan.buffers = kv_cache_buffers(c, max_len);
    plan.offsets = layout_arena(plan.buffers, &plan.peak_bytes);
    plan.activation_bytes = plan.peak_bytes;
    kc.arena = allocate_arena(plan, *m.backend);
    kc.act = kv_cache_slots_bind(c, max_len, kc.arena);
    if (m.backend->matmul_widens_bf16_weights()) kv_cache_widen_weights(kc, m);
    return kc;
}

}  // namespace skew
