// The activation table read two ways: as memory-plan buffers and as arena bindings
// (model/activations.h has the table and what each slot holds).
#include "model/activations.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "engine/error.h"

namespace skew {
namespace {

// Which slots a table holds and how many copies: a training microbatch's (the model under
// train.recompute and train.expert_grads) or a KV cache's (the forward's lines only, one copy of
// each but the CACHED ones, the expert slots as stored mode's).
struct TableMode {
    const ModelConfig* model = nullptr;
    Recompute recompute = Recompute::BLOCK;
    bool deferred_experts = false;
    bool kv_cache = false;
};

TableMode training_mode(const Config& cfg) {
    return TableMode{&cfg.model, cfg.train.recompute, cfg.train.expert_grads == ExpertGrads::DEFERRED, false};
}

TableMode kv_cache_mode(const ModelConfig& m) { return TableMode{&m, Recompute::BLOCK, false, true}; }

// Whether a line kept `keep` has one copy per block in table `t`.
bool per_block(const TableMode& t, ActKeep keep) {
    return t.kv_cache ? keep == ActKeep::CACHED : act_kept_per_block(keep, t.recompute);
}

// A phase of the table (SKEW_ACTIVATIONS): the plan's Phase; for FR that the backward's recompute
// writes the slot again before reading it (dead during the head unless kept per block); whether a
// forward writes it first (F, FR, HF: the lines a KV cache holds).
struct TablePhase {
    Phase phase;
    bool recomputed, forward;
};

namespace table_phase {
constexpr TablePhase F{Phase::FORWARD, false, true}, FR{Phase::FORWARD, true, true}, HF{Phase::HEAD, false, true},
    H{Phase::HEAD, false, false}, BW{Phase::BACKWARD, false, false}, O{Phase::OPTIMIZER, false, false};
}  // namespace table_phase

// Whether table `t` holds a line that starts in phase `first`.
bool in_table(const TableMode& t, const TablePhase& first) { return !t.kv_cache || first.forward; }

// Whether block `b` of the model is of the kind `when` names.
bool block_holds(const TableMode& t, const ActDims& D, ActWhen when, int64_t b) {
    const ModelConfig& m = *t.model;
    switch (when) {
        case ActWhen::EXPERT_PARALLEL: return m.is_moe_block(b) && D.M > 1;
        case ActWhen::ALL: return true;
        case ActWhen::DENSE: return !m.is_moe_block(b);
        case ActWhen::MOE: return m.is_moe_block(b);
        case ActWhen::MOE_STORED: return m.is_moe_block(b) && !t.deferred_experts;
        case ActWhen::QK_NORM: return m.qk_norm != QkNorm::NONE;
        case ActWhen::SHARED: return m.is_moe_block(b) && m.d_shared() > 0;
        case ActWhen::SHARED_GATE:
            return m.is_moe_block(b) && m.d_shared() > 0 && m.shared_expert_gate == SharedExpertGate::SIGMOID;
    }
    return false;
}

// Whether any block of the model is of the kind `when` names (the model holds the slot at all).
bool holds(const TableMode& t, const ActDims& D, ActWhen when) {
    for (int64_t b = 0; b < t.model->n_blocks; ++b)
        if (block_holds(t, D, when, b)) return true;
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
void bind_slot(T*& member, const Arena& arena, const std::string& name, int64_t bytes, const TableMode& t,
               const ActDims& D, ActWhen when, bool) {
    if (holds(t, D, when)) member = static_cast<T*>(slot_ptr(arena, name, bytes));
}

// One pointer per block: each block of the slot's kind gets its own buffer ("<name>.<block>") when
// `per_block`, else the one shared buffer; blocks of another kind get null.
template <class T>
void bind_slot(std::vector<T*>& member, const Arena& arena, const std::string& name, int64_t bytes, const TableMode& t,
               const ActDims& D, ActWhen when, bool per_block) {
    const int64_t n_blocks = t.model->n_blocks;
    member.assign(size_t(n_blocks), nullptr);
    if (!holds(t, D, when)) return;
    T* shared = per_block ? nullptr : static_cast<T*>(slot_ptr(arena, name, bytes));
    for (int64_t b = 0; b < n_blocks; ++b)
        if (block_holds(t, D, when, b))
            member[size_t(b)] = per_block ? static_cast<T*>(slot_ptr(arena, per_block_name(name, b), bytes)) : shared;
}

// The buffers of table `t`: in a training plan with the table's phases; in a KV cache all alive
// together (FORWARD to OPTIMIZER: nothing shares bytes).
std::vector<BufferSpec> table_buffers(const TableMode& t, const ActDims& D) {
    using namespace table_phase;
    std::vector<BufferSpec> out;
    auto add = [&](const std::string& name, DType dtype, ActWhen when, ActKeep keep, BufferKind kind,
                   const TablePhase& first, const TablePhase& last, std::vector<int64_t> shape) {
        if (!in_table(t, first) || !holds(t, D, when)) return;
        const bool per = per_block(t, keep);
        BufferSpec b;
        b.kind = kind;
        b.dtype = dtype;
        b.shape = std::move(shape);
        b.first = t.kv_cache ? Phase::FORWARD : first.phase;
        b.last = t.kv_cache ? Phase::OPTIMIZER : last.phase;
        b.dead_in_head = !t.kv_cache && first.recomputed && !per;
        b.component = kind == BufferKind::WORKSPACE ? "workspace" : "activations";
        if (!per) {
            b.name = name;
            out.push_back(std::move(b));
            return;
        }
        for (int64_t blk = 0; blk < t.model->n_blocks; ++blk) {
            if (!block_holds(t, D, when, blk)) continue;
            b.name = per_block_name(name, blk);
            out.push_back(b);
        }
    };
#define SKEW_ACT_DECLARE(member, type, name, dtype, when, keep, kind, first, last, ...) \
    add(name, DType::dtype, ActWhen::when, ActKeep::keep, BufferKind::kind, first, last, {__VA_ARGS__});
    SKEW_ACTIVATIONS(SKEW_ACT_DECLARE)
#undef SKEW_ACT_DECLARE
    return out;
}

// Table `t`'s slots bound to `arena`'s buffers of the same names.
ActSlots bind_table(const TableMode& t, const ActDims& dims, const Arena& arena) {
    using namespace table_phase;
    if (!arena.plan) fail("model: the arena has no memory plan");
    // The LM head works in token chunks of act.logits's size (model.cpp, inference.cpp): one row of
    // padded_vocab_size fp32 logits is the least it needs; the plan gives it dims.logits.
    ActDims D = dims;
    D.logits = t.model->padded_vocab_size;
    ActSlots a;
    a.recompute = t.recompute;
#define SKEW_ACT_BIND(member, type, name, dtype, when, keep, kind, first, last, ...)                    \
    if (in_table(t, first))                                                                             \
        bind_slot(a.member, arena, name, shape_bytes(DType::dtype, {__VA_ARGS__}), t, D, ActWhen::when, \
                  per_block(t, ActKeep::keep));
    SKEW_ACTIVATIONS(SKEW_ACT_BIND)
#undef SKEW_ACT_BIND
    a.logits_bytes = arena.plan->buffers[size_t(lm_head_logits_buffer(*arena.plan))].bytes();
    return a;
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
    return table_buffers(training_mode(cfg), D);
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
    return bind_table(training_mode(cfg), dims, arena);
}

int lm_head_logits_buffer(const MemoryPlan& plan) {
#define SKEW_ACT_FIND_LOGITS(member, type, name, ...) \
    if (std::string_view(#member) == "logits") return plan.find(name);
    SKEW_ACTIVATIONS(SKEW_ACT_FIND_LOGITS)
#undef SKEW_ACT_FIND_LOGITS
    return -1;
}

std::vector<BufferSpec> kv_cache_buffers(const ModelConfig& m, int64_t max_len) {
    return table_buffers(kv_cache_mode(m), act_dims(m, 1, max_len, 0));
}

ActSlots kv_cache_slots_bind(const ModelConfig& m, int64_t max_len, const Arena& arena) {
    return bind_table(kv_cache_mode(m), act_dims(m, 1, max_len, 0), arena);
}

}  // namespace skew
