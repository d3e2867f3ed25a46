// The memory plan of one run, assembled from what each owner declares: weights and gradients from
// the parameter table (engine/), optimizer state and scratch (optim/state_plan.h), the model's
// activation table (model/activations.h) and the backend's workspace (engine/memory_plan.h
// backend_workspace); engine/ lays them out (paper Eq. 2, Appendix B). `skew plan` and the trainer
// use the same plan; the arena is allocated from it.
#pragma once
#include <cstdint>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "optim/state_plan.h"

namespace skew {

/// The full plan of rank layout.rank for one optimizer and microbatch (sequences per rank; must
/// divide the rank's share train.batch_size / world_size), sized for plan_backend(cfg). `table` is
/// the model's table (build_param_table). Buffers in plan order: weights, gradients, optimizer
/// state, activations (ws.scalars last), the backend's whole-step workspace, ws.optimizer, the
/// backend's op scratch. Weights and gradients are those the rank holds (held_param_table: with
/// expert parallelism M each bank's n_experts / M experts); with ZeRO-1 (layout.zero()) the state
/// and the optimizer scratch are those of its owned ranges only (zero_partition,
/// docs/distributed.md), else of everything it holds. The default layout is one process. Throws
/// skew::Error for a bad microbatch or layout, an unknown optimizer type or a plan beyond 4 EiB.
MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, int64_t microbatch,
                             const ParallelLayout& layout = {});

/// The plan `skew plan --world-size N` reports: build_memory_plan for the rank of `layout` with
/// the most optimizer state (ZeroPartition::largest_rank; layout.rank is ignored), whose peak is
/// the largest of the run's ranks (every other part is the same on every rank).
MemoryPlan build_largest_rank_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t microbatch, const ParallelLayout& layout);

/// The largest microbatch (a divisor of the rank's share of train.batch_size) whose plan peak
/// (of the largest rank) fits `budget_bytes`; 0 when none does.
int64_t largest_fitting_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t budget_bytes, const ParallelLayout& layout = {});

}  // namespace skew
