// The optimizer step over the parameter table (docs/design.md "Optimizers"): the tier policy as data,
// the state each parameter keeps (paper Eq. 2, docs/optimizers.md §1), one entry
// `optimizer_step` dispatching to SkewAdam (Algorithm 1), AdamW, Lion, Muon, Adafactor and
// GaLore on the CPU.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"

namespace skew {

struct Arena;

constexpr int STATE_KIND_COUNT = int(ChoiceNames<StateKind>::items.size());  // number of StateKind values

/// How one parameter is updated, resolved from the config and the parameter table (tier, role,
/// shape). For the SkewAdam family this is the tier policy (vectors get a full second moment where
/// the tier says factored, Algorithm 1 line 2); for the baselines it records the routing (Muon's
/// internal Adam, GaLore's projected matrices).
struct ParamPolicy {
    OptimizerType kind = OptimizerType::SKEWADAM;  // the optimizer's type (muon-kj takes the Muon step)
    MomentumKind momentum = MomentumKind::NONE;
    SecondMomentKind second_moment = SecondMomentKind::NONE;
    double weight_decay = 0.0;    // lambda for this parameter (router: 0 for the baselines)
    bool muon_adam = false;       // Muon: internal Adam instead of Newton-Schulz
    bool galore_project = false;  // GaLore: projected (matrix); else plain Adam
    int64_t galore_rank = 0;      // effective rank min(rank, rows, cols)
};

/// Whether Muon sends parameter `p` to its internal Adam (embeddings, positions, router, vectors)
/// rather than Newton-Schulz; role-based, from the parameter table.
bool muon_uses_adam(const ParamInfo& p);

/// Resolve the policy of parameter `p` under `opt`. Throws skew::Error for an unknown type.
ParamPolicy param_policy(const OptimizerConfig& opt, const ParamInfo& p);

/// One fp32 state tensor a parameter keeps.
struct StateSlotSpec {
    StateKind kind;
    std::vector<int64_t> shape;
    int64_t numel() const;
};

/// The state tensors of parameter `p` under `opt`, in StateKind order (all fp32): the one source of
/// the state layout (the memory plan's buffers are these, optim/state_plan.h). Factored and GaLore
/// state carry the matrix count first: (n_matrices, rows), (n_matrices, r, cols), ...
std::vector<StateSlotSpec> optimizer_param_state(const OptimizerConfig& opt, const ParamInfo& p);

/// Total optimizer state bytes of `opt` over `table` (fp32 state), from optimizer_param_state.
int64_t optimizer_state_bytes(const OptimizerConfig& opt, const ParamTable& table);

/// One parameter as the optimizer sees it. `weight` holds info->dtype (bf16 or fp32) in
/// info->shape, row-major; `grad` holds grad_dtype in the same shape (nullptr: no gradient this
/// step, the parameter is skipped entirely: no state decay, no weight decay). State pointers are
/// indexed by StateKind (nullptr where the parameter keeps no such state).
/// view_begin/view_count select elements [begin, begin+count) of the tensor, with every pointer
/// (weight, grad, full-size state) pointing at element `begin`; the rounding noise is keyed by the
/// tensor's 64-bit element index. Views are accepted by the purely elementwise updates (AdamW, Lion,
/// Muon's internal Adam, GaLore's unprojected Adam); view_count = -1 means the whole tensor.
struct ParamSlot {
    const ParamInfo* info = nullptr;
    void* weight = nullptr;
    const void* grad = nullptr;
    DType grad_dtype = DType::BF16;
    std::array<float*, STATE_KIND_COUNT> state{};
    int64_t view_begin = 0;
    int64_t view_count = -1;
    float grad_scale = 1.0f;  // multiplies every gradient element as it is read (set from OptimStep::grad_scale)
    /// Added to every element index that keys the rounding noise: a slot over one matrix of a bank
    /// (deferred expert gradients, info a one-matrix copy of the bank's) sets the matrix's first
    /// element index in the bank, so the noise equals the whole-bank step's. 0 otherwise.
    int64_t element_base = 0;

    float* st(StateKind k) const { return state[size_t(k)]; }
};

/// One optimizer step's scalars. t is this optimizer's global step, 1-based (bias corrections,
/// Adafactor's decay, GaLore's refresh, rounding noise); lr is lr_t from the trainer's schedule.
struct OptimStep {
    int64_t t = 1;
    double lr = 0.0;
    uint64_t seed = 42;  // run seed; rounding noise is Philox(seed, ROUNDING, t, ParamInfo::index, element)
    /// The global-norm clip coefficient min(1, max_norm / (norm + 1e-6)) folded into the step: each
    /// gradient element is read as fp32 g * grad_scale (no separate rescale pass; 1 reads G exactly).
    /// Only where optimizer_folds_grad_scale(opt); other optimizers need 1 (the caller rescales).
    float grad_scale = 1.0f;
};

/// True when `opt`'s step applies OptimStep::grad_scale itself (SkewAdam, AdamW, Lion, Adafactor on
/// the CPU and CUDA backends); false for Muon and GaLore, whose gradients the caller rescales.
bool optimizer_folds_grad_scale(const OptimizerConfig& opt);

/// Apply one step of `opt` to every parameter in `params` on the CPU (OpenMP loops).
/// Throws skew::Error naming the tensor when a required state pointer is missing, a view is given
/// to a whole-matrix update, or the shape is unsupported.
void optimizer_step(const OptimizerConfig& opt, std::span<ParamSlot> params, const OptimStep& step);

/// Host storage for optimizer state laid out by optimizer_param_state (tests, tools without an
/// arena). Zero-initialized; binds each slot's state pointers.
struct HostOptimState {
    std::vector<std::vector<float>> buffers;
};
void allocate_host_state(const OptimizerConfig& opt, std::span<ParamSlot> params, HostOptimState& storage);

/// Bind each slot's state pointers to the arena's buffers "state.<param>.<kind>" (the plan declared
/// them from optimizer_param_state). `params[i].info` must be table.params[i]'s. Throws skew::Error
/// when the plan lacks a state the optimizer needs or holds other state (a plan built for another
/// optimizer).
void bind_arena_state(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena,
                      std::span<ParamSlot> params);

/// Slots for every parameter of `table` over the arena: weight "weight.<param>", gradient
/// "grad.<param>" (its dtype from the plan) and the state bound by bind_arena_state. The arena must
/// have been allocated from a plan for `opt`; throws skew::Error naming a missing buffer. With
/// deferred expert gradients (the plan holds ws.expert_grad and no "grad.<bank>"), the expert
/// banks' slots have grad nullptr: the caller steps them one expert at a time.
std::vector<ParamSlot> arena_param_slots(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena);

/// arena_param_slots without the state: weight and gradient of every parameter of `table` (the
/// ZeRO-1 step binds the state of its owned ranges only, optim/zero_partition.h).
std::vector<ParamSlot> arena_weight_grad_slots(const OptimizerConfig& opt, const ParamTable& table, const Arena& arena);

/// Bytes the CPU step reads and writes per parameter element (weights, grads, state; the
/// reductions' second read of grad and state included), for the benchmark.
double optimizer_bytes_per_param(const OptimizerConfig& opt, const ParamInfo& p, DType grad_dtype);

}  // namespace skew
