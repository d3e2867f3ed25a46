// The memory plan of one run, assembled from what each owner declares: weights and gradients from
// the parameter table (engine/), optimizer state and scratch (optim/state_plan.h), the model's
// activation table (model/activations.h) and the backend's workspace (engine/memory_plan.h
// backend_workspace); engine/ lays them out (paper Eq. 2, Appendix B). `skew plan` and the trainer
// use the same plan; the arena is allocated from it.
#pragma once
#include <cstdint>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"
#include "optim/state_plan.h"

namespace skew {

/// The full plan for one optimizer and microbatch (sequences; must divide train.batch_size),
/// sized for plan_backend(cfg). Buffers in plan order: weights, gradients, optimizer state,
/// activations (ws.scalars last), the backend's whole-step workspace, ws.optimizer, the backend's
/// op scratch. Throws skew::Error for a bad microbatch, an unknown optimizer type or a plan
/// beyond 4 EiB.
MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                             int64_t microbatch);

/// The largest microbatch (a divisor of train.batch_size) whose plan peak fits `budget_bytes`;
/// 0 when none does.
int64_t largest_fitting_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t budget_bytes);

}  // namespace skew
