// Binding optimizer state to the arena: every state tensor is the memory plan's buffer
// "state.<param>.<kind>" (engine/memory_plan.h optimizer_state_buffers), so the state the optimizer
// touches is the plan's by construction; a missing or differently sized buffer is an error.
#include "engine/arena.h"
#include "engine/error.h"
#include "optim/optimizer.h"

namespace skew {

void bind_arena_state(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena,
                      std::span<ParamSlot> params) {
    if (params.size() != table.params.size())
        fail("optimizer '{}': {} parameter slots for a table of {} parameters", opt.name, params.size(),
             table.params.size());
    // The state buffers the arena was laid out with (its plan), else the plan's closed form.
    std::vector<BufferSpec> state_bufs;
    if (arena.plan) {
        for (const BufferSpec& b : arena.plan->buffers)
            if (b.kind == BufferKind::STATE) state_bufs.push_back(b);
    } else {
        state_bufs = optimizer_state_buffers(opt, table);
    }
    for (ParamSlot& s : params) s.state.fill(nullptr);
    for (const BufferSpec& b : state_bufs) {
        if (b.param < 0 || size_t(b.param) >= params.size())
            fail("optimizer '{}': plan buffer '{}' names no parameter", opt.name, b.name);
        if (b.dtype != DType::F32) fail("optimizer '{}': plan buffer '{}' is not fp32", opt.name, b.name);
        params[size_t(b.param)].state[size_t(b.state)] = arena.get<float>(b.name);
    }
    for (size_t i = 0; i < params.size(); ++i) {
        const ParamInfo& p = table.params[i];
        if (params[i].info != &p && (!params[i].info || params[i].info->name != p.name))
            fail("optimizer '{}': slot {} is '{}', the table says '{}'", opt.name, i,
                 params[i].info ? params[i].info->name : std::string("?"), p.name);
        for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
            if (!params[i].st(spec.kind))
                fail("optimizer '{}': the memory plan has no {} state for '{}'", opt.name, state_kind_name(spec.kind),
                     p.name);
        }
    }
    // Sizes: the plan's buffer of each kind must hold exactly what the optimizer touches.
    for (const BufferSpec& b : state_bufs) {
        bool found = false;
        for (const StateSlotSpec& spec : optimizer_param_state(opt, table.params[size_t(b.param)]))
            if (spec.kind == b.state) {
                found = true;
                if (spec.numel() != b.numel())
                    fail("optimizer '{}': plan buffer '{}' holds {} values, the optimizer uses {}", opt.name, b.name,
                         b.numel(), spec.numel());
            }
        if (!found)
            fail("optimizer '{}': plan buffer '{}' is state the optimizer does not use", opt.name, b.name);
    }
}

std::vector<ParamSlot> arena_param_slots(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena) {
    if (!arena.plan) fail("optimizer '{}': the arena has no memory plan", opt.name);
    std::vector<ParamSlot> slots(table.params.size());
    for (size_t i = 0; i < slots.size(); ++i) {
        const ParamInfo& p = table.params[i];
        const int g = arena.plan->find("grad." + p.name);
        if (g < 0) fail("optimizer '{}': the memory plan has no gradient buffer for '{}'", opt.name, p.name);
        slots[i].info = &p;
        slots[i].weight = arena.ptr("weight." + p.name);
        slots[i].grad = arena.ptr(g);
        slots[i].grad_dtype = arena.plan->buffers[size_t(g)].dtype;
    }
    bind_arena_state(opt, table, arena, slots);
    return slots;
}

}  // namespace skew
