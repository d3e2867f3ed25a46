// The activation table read two ways: as memory-plan buffers and as arena bindings
// (model/activations.h has the table and what each slot holds).
#include "model/activations.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "engine/error.h"

namespace skew {
namespace {

// Whether block `b` of cfg.model is of the kind `when` names.
bool block_holds(const Config& cfg, const ActDims& D, ActWhen when, int64_t b) {
    const ModelConfig& m = cfg.model;
    switch (when) {
        case ActWhen::EXPERT_PARALLEL: return m.is_moe_block(b) && D.M > 1;
        case ActWhen::ALL: return true;
        case ActWhen::DENSE: return !m.is_moe_block(b);
        case ActWhen::MOE: return m.is_moe_block(b);
        case ActWhen::MOE_STORED: return m.is_moe_block(b) && cfg.train.expert_grads != ExpertGrads::DEFERRED;
        case ActWhen::QK_NORM: return m.qk_norm != QkNorm::NONE;
        case ActWhen::SHARED: return m.is_moe_block(b) && m.d_shared() > 0;
        case ActWhen::SHARED_GATE:
            return m.is_moe_block(b) && m.d_shared() > 0 && m.shared_expert_gate == SharedExpertGate::SIGMOID;
    }
    return false;
}

// Whether any block of cfg.model is of the kind `when` names (the model holds the slot at all).
bool holds(const Config& cfg, const ActDims& D, ActWhen when) {
    for (int64_t b = 0; b < cfg.model.n_blocks; ++b)
        if (block_holds(cfg, D, when, b)) return true;
    return false;
}

std::string per_block_name(const std::string& name, int64_t b) { return name + "." + std::to_string(b); }

int64_t shape_bytes(DType dt, std::initializer_list<int64_t> shape) {
    int64_t n = dtype_bytes(dt);
    for (int64_t d : shape) n *= d;
    return n;
}

// The plan's buffer `name` with at least `bytes` bytes; throws naming it when missing or too small.
void* slot_ptr(const Arena& arena, const std::string& name, int64_t bytes) {
    const int i = arena.plan->find(name);
    if (i < 0)
        fail("model: the memory plan has no activation slot '{}' (a plan of another model or train.recompute mode?)",
             name);
    const int64_t have = arena.plan->buffers[size_t(i)].bytes();
    if (have < bytes) fail("model: activation slot '{}' holds {} bytes, the model needs {}", name, have, bytes);
    return arena.ptr(i);
}

// One slot for the step.
template <class T>
void bind_slot(T*& member, const Arena& arena, const std::string& name, int64_t bytes, const Config& cfg,
               const ActDims& D, ActWhen when, bool) {
    if (holds(cfg, D, when)) member = static_cast<T*>(slot_ptr(arena, name, bytes));
}

// One pointer per block: each block of the slot's kind gets its own buffer ("<name>.<block>") when
// `per_block`, else the one shared buffer; blocks of another kind get null.
template <class T>
void bind_slot(std::vector<T*>& member, const Arena& arena, const std::string& name, int64_t bytes, const Config& cfg,
               const ActDims& D, ActWhen when, bool per_block) {
    const ModelConfig& m = cfg.model;
    member.assign(size_t(m.n_blocks), nullptr);
    if (!holds(cfg, D, when)) return;
    T* shared = per_block ? nullptr : static_cast<T*>(slot_ptr(arena, name, bytes));
    for (int64_t b = 0; b < m.n_blocks; ++b)
        if (block_holds(cfg, D, when, b))
            member[size_t(b)] = per_block ? static_cast<T*>(slot_ptr(arena, per_block_name(name, b), bytes)) : shared;
}

}  // namespace

ActDims act_dims(const ModelConfig& m, int64_t microbatch, int64_t seq_len, int64_t lm_head_workspace_bytes,
                 int64_t expert_parallel) {
    if (expert_parallel < 1 || m.n_experts % expert_parallel != 0)
        fail("parallel.expert: {} does not divide model.n_experts {}", expert_parallel, m.n_experts);
    ActDims D;
    D.B = microbatch;
    D.T = seq_len;
    D.N = D.B * D.T;
    D.d = m.d_model;
    D.H = m.n_heads;
    D.qd = m.n_heads * m.head_dim();
    D.kvd = m.n_kv_heads * m.head_dim();
    const bool per_head = m.qk_norm == QkNorm::PER_HEAD;
    D.q_norm_rows = per_head ? D.N * m.n_heads : D.N;
    D.k_norm_rows = per_head ? D.N * m.n_kv_heads : D.N;
    D.ff = m.d_ff;
    D.de = m.d_expert;
    D.ds = m.d_shared();
    D.E = m.n_experts;
    D.k = m.top_k;
    D.NK = D.N * D.k;
    D.M = expert_parallel;
    D.El = D.E / D.M;
    D.NKr = D.M * D.NK;
    D.logits = std::max(std::min(D.N, LOGITS_CHUNK_TOKENS) * m.padded_vocab_size, (lm_head_workspace_bytes + 3) / 4);
    return D;
}

int64_t table_expert_parallel(const ParamTable& table, const ModelConfig& m) {
    for (const ParamInfo& p : table.params)
        if (p.tier == Tier::EXPERTS && p.shape[0] > 0) return m.n_experts / p.shape[0];
    return 1;
}

std::vector<BufferSpec> model_activation_buffers(const Config& cfg, const ActDims& D) {
    const ModelConfig& m = cfg.model;
    const Recompute mode = cfg.train.recompute;
    // a table phase: the Phase, and for FR that the backward's recompute writes the slot again
    // before reading it (dead during the head unless the mode keeps it per block)
    struct TablePhase {
        Phase phase;
        bool recomputed;
    };
    const TablePhase F{Phase::FORWARD, false}, FR{Phase::FORWARD, true}, H{Phase::HEAD, false},
        BW{Phase::BACKWARD, false}, O{Phase::OPTIMIZER, false};
    std::vector<BufferSpec> out;
    auto add = [&](const std::string& name, DType dtype, ActWhen when, ActKeep keep, BufferKind kind, TablePhase first,
                   TablePhase last, std::vector<int64_t> shape) {
        if (!holds(cfg, D, when)) return;
        const bool per_block = act_kept_per_block(keep, mode);
        BufferSpec b;
        b.kind = kind;
        b.dtype = dtype;
        b.shape = std::move(shape);
        b.first = first.phase;
        b.last = last.phase;
        b.dead_in_head = first.recomputed && !per_block;
        b.component = kind == BufferKind::WORKSPACE ? "workspace" : "activations";
        if (!per_block) {
            b.name = name;
            out.push_back(std::move(b));
            return;
        }
        for (int64_t blk = 0; blk < m.n_blocks; ++blk) {
            if (!block_holds(cfg, D, when, blk)) continue;
            b.name = per_block_name(name, blk);
            out.push_back(b);
        }
    };
#define SKEW_ACT_DECLARE(member, type, name, dtype, when, keep, kind, first, last, ...) \
    add(name, DType::dtype, ActWhen::when, ActKeep::keep, BufferKind::kind, first, last, {__VA_ARGS__});
    SKEW_ACTIVATIONS(SKEW_ACT_DECLARE)
#undef SKEW_ACT_DECLARE
    (void)O;
    (void)FR;
    return out;
}

std::vector<BufferSpec> deferred_expert_buffers(const Config& cfg, const ActDims& D, int64_t accum_steps,
                                                DType grad_dtype) {
    const ModelConfig& m = cfg.model;
    std::vector<BufferSpec> out;
    auto add = [&](const std::string& name, DType dtype, std::vector<int64_t> shape) {
        BufferSpec b;
        b.name = name;
        b.kind = BufferKind::GRAD;
        b.dtype = dtype;
        b.shape = std::move(shape);
        b.first = Phase::FORWARD;
        b.last = Phase::OPTIMIZER;
        b.component = "kept expert operands";
        out.push_back(std::move(b));
    };
    bool any = false;
    for (int64_t b = 0; b < m.n_blocks; ++b) {
        if (!m.is_moe_block(b)) continue;
        any = true;
        for (int64_t mb = 0; mb < accum_steps; ++mb) {
            const std::string pre = deferred_expert_prefix(b, mb);
            add(pre + "moe_in", DType::BF16, {D.NK, D.d});
            add(pre + "moe_act", DType::BF16, {D.NK, D.de});
            add(pre + "d_moe_h1", DType::BF16, {D.NK, D.de});
            add(pre + "d_moe_h2", DType::BF16, {D.NK, D.de});
            add(pre + "d_moe_out", DType::BF16, {D.NK, D.d});
        }
    }
    if (any) {
        auto scratch = [&](const char* name, DType dtype, int64_t numel) {
            BufferSpec s;
            s.name = name;
            s.kind = BufferKind::WORKSPACE;
            s.dtype = dtype;
            s.shape = {numel};
            s.first = Phase::OPTIMIZER;
            s.last = Phase::OPTIMIZER;
            s.component = "workspace";
            out.push_back(std::move(s));
        };
        scratch(ws_buffer::EXPERT_GRAD, grad_dtype, D.de * D.d);
        const int64_t c = deferred_gram_chunk_rows(D);
        scratch(ws_buffer::EXPERT_GRAM, DType::F32, deferred_gram_partials_words(D) + 2 * c * c);
    }
    return out;
}

int64_t deferred_gram_chunk_rows(const ActDims& D) { return std::max<int64_t>(1, std::min<int64_t>(1024, D.N)); }

int64_t deferred_gram_partials_words(const ActDims& D) { return (3 * D.E + 63) / 64 * 64; }

std::string deferred_expert_prefix(int64_t block, int64_t microbatch) {
    return "kept." + std::to_string(block) + "." + std::to_string(microbatch) + ".";
}

ActSlots act_slots_bind(const Config& cfg, const ActDims& dims, const Arena& arena) {
    if (!arena.plan) fail("model: the arena has no memory plan");
    const ModelConfig& m = cfg.model;
    // The LM head works in token chunks of act.logits's size (model.cpp): one row of padded_vocab_size
    // fp32 logits is the least it needs; the plan gives it dims.logits.
    ActDims D = dims;
    D.logits = m.padded_vocab_size;
    ActSlots a;
    a.recompute = cfg.train.recompute;
#define SKEW_ACT_BIND(member, type, name, dtype, when, keep, kind, first, last, ...)                  \
    bind_slot(a.member, arena, name, shape_bytes(DType::dtype, {__VA_ARGS__}), cfg, D, ActWhen::when, \
              act_kept_per_block(ActKeep::keep, a.recompute));
    SKEW_ACTIVATIONS(SKEW_ACT_BIND)
#undef SKEW_ACT_BIND
    a.logits_bytes = arena.plan->buffers[size_t(lm_head_logits_buffer(*arena.plan))].bytes();
    return a;
}

int lm_head_logits_buffer(const MemoryPlan& plan) {
#define SKEW_ACT_FIND_LOGITS(member, type, name, ...) \
    if (std::string_view(#member) == "logits") return plan.find(name);
    SKEW_ACTIVATIONS(SKEW_ACT_FIND_LOGITS)
#undef SKEW_ACT_FIND_LOGITS
    return -1;
}

}  // namespace skew
