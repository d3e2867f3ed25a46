// The optimizer step of the expert banks under deferred expert weight gradients
// (train.expert_grads: deferred; docs/design.md "Deferred expert gradients"): one expert matrix at
// a time, its dW = Σ_microbatches dY^T X formed from the operands the backward kept, into one
// matrix of scratch, then the optimizer's update of that matrix alone.
#pragma once
#include <span>

#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_runner.h"

namespace skew {

/// Steps every expert matrix of every MoE block's banks (w1, w2, w3), each from its kept operands:
/// scratch = 0; per kept microbatch scratch += dY_e^T X_e (Backend::matmul over the expert's rows,
/// the product and accumulation order of the stored mode's per-expert weight gradient);
/// times m.deferred.clip_coef (the clip of optimizers that do not fold the scale); then `runner`
/// steps a slot over the one matrix: info a one-matrix copy of the bank's (same index), weight and
/// state at the matrix's offset, element_base its first element, so updates and rounding noise
/// equal the whole-bank step's. Every expert is stepped (an idle one with a zero gradient, as the
/// stored mode does; train.idle_experts: skip restores it afterwards). Runs on any backend: every
/// operation is queued on it (no host synchronization per expert). `slots` from
/// arena_param_slots (the banks' grad nullptr). No-op when m.deferred.on is false. Throws
/// skew::Error when a bank's state does not split into equal per-matrix parts.
void step_deferred_experts(Model& m, const OptimizerConfig& opt, OptimizerRunner& runner, std::span<ParamSlot> slots,
                           const OptimStep& step);

}  // namespace skew
