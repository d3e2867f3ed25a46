// Binding optimizer state to the arena: the plan declared every state tensor from
// optimizer_param_state (optim/state_plan.h) as "state.<param>.<kind>", so binding looks each one
// up by name; a plan built for another optimizer lacks one or holds others, and is refused.
#include "engine/arena.h"
#include "engine/error.h"
#include "optim/optimizer.h"

namespace skew {

void bind_arena_state(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena,
                      std::span<ParamSlot> params) {
    if (!arena.plan) fail("optimizer '{}': the arena has no memory plan", opt.name);
    if (params.size() != table.params.size())
        fail("optimizer '{}': {} parameter slots for a table of {} parameters", opt.name, params.size(),
             table.params.size());
    size_t bound = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        const ParamInfo& p = table.params[i];
        if (params[i].info != &p && (!params[i].info || params[i].info->name != p.name))
            fail("optimizer '{}': slot {} is '{}', the table says '{}'", opt.name, i,
                 params[i].info ? params[i].info->name : std::string("?"), p.name);
        params[i].state.fill(nullptr);
        for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
            const int b = arena.plan->state_of(p.index, spec.kind);
            if (b < 0)
                fail("optimizer '{}': the memory plan has no {} state for '{}' (a plan built for optimizer '{}')",
                     opt.name, choice_name(spec.kind), p.name, arena.plan->optimizer);
            params[i].state[size_t(spec.kind)] = static_cast<float*>(arena.ptr(b));
            ++bound;
        }
    }
    size_t planned = 0;
    for (const BufferSpec& b : arena.plan->buffers) planned += b.kind == BufferKind::STATE ? 1 : 0;
    if (planned != bound)
        fail(
            "optimizer '{}': the memory plan holds {} state tensors, the optimizer uses {} (a plan built for "
            "optimizer '{}')",
            opt.name, planned, bound, arena.plan->optimizer);
}

std::vector<ParamSlot> arena_weight_grad_slots(const OptimizerConfig& opt, const ParamTable& table,
                                               const Arena& arena) {
    if (!arena.plan) fail("optimizer '{}': the arena has no memory plan", opt.name);
    std::vector<ParamSlot> slots(table.params.size());
    for (size_t i = 0; i < slots.size(); ++i) {
        const ParamInfo& p = table.params[i];
        const int w = arena.plan->weight_of(p.index), g = arena.plan->grad_of(p.index);
        if (w < 0) fail("optimizer '{}': the memory plan has no weight buffer for '{}'", opt.name, p.name);
        const int deferred = arena.plan->find(ws_buffer::EXPERT_GRAD);
        if (g < 0 && is_expert_bank(p) && deferred >= 0) {  // deferred expert gradients
            slots[i].info = &p;
            slots[i].weight = arena.ptr(w);
            slots[i].grad = nullptr;
            slots[i].grad_dtype = arena.plan->buffers[size_t(deferred)].dtype;
            continue;
        }
        if (g < 0) fail("optimizer '{}': the memory plan has no gradient buffer for '{}'", opt.name, p.name);
        slots[i].info = &p;
        slots[i].weight = arena.ptr(w);
        slots[i].grad = arena.ptr(g);
        slots[i].grad_dtype = arena.plan->buffers[size_t(g)].dtype;
    }
    return slots;
}

std::vector<ParamSlot> arena_param_slots(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena) {
    std::vector<ParamSlot> slots = arena_weight_grad_slots(opt, table, arena);
    bind_arena_state(opt, table, arena, slots);
    return slots;
}

}  // namespace skew
