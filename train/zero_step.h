// The ZeRO-1 optimizer step of one rank (docs/distributed.md, "ZeRO-1"): the rank steps only the
// parameter ranges it owns (optim/zero_partition.h), with their state, then the updated weights
// (bf16 and fp32) are all-gathered so every rank holds the whole model again. Given the same summed
// gradients on every rank the result equals the one-process step bit for bit: each owned range is
// stepped with the one-process arithmetic and rounding noise (element_base keys the noise by the
// element's index in the whole tensor), and the gather only copies.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "dist/communicator.h"
#include "engine/arena.h"
#include "engine/parallel_layout.h"
#include "kernels/backend.h"
#include "optim/optimizer_runner.h"
#include "optim/zero_partition.h"
#include "train/idle_experts.h"

namespace skew {

/// One rank's share of the optimizer under ZeRO-1. Not copyable: the slots point into owned_table.
struct ZeroOptimizer {
    ParallelLayout layout;
    ZeroPartition partition;
    ParamTable owned_table;  // this rank's owned parts (owned_param_info): the owned slots' infos
    ZeroSlots slots;         // whole: every held parameter (weight, gradient); owned: the ranges, state bound
    /// The ranks that hold the same expert shard (world.split by expert rank) when expert_parallel
    /// > 1 and no communicator of them was given, else nullptr (the world gathers the banks).
    std::unique_ptr<Communicator> expert_group;
    /// The given communicator of those ranks (the trainer's expert holders, NCCL when the world
    /// step runs over NCCL), not owned; used instead of expert_group when set.
    Communicator* expert_holders = nullptr;

    /// The communicator that gathers the expert banks: expert_holders, expert_group, or nullptr.
    Communicator* bank_group() const { return expert_holders ? expert_holders : expert_group.get(); }

    ZeroOptimizer() = default;
    ZeroOptimizer(const ZeroOptimizer&) = delete;
    ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;
};

/// Set up the ZeRO-1 step of rank layout.rank over its arena (allocated from build_memory_plan with
/// `layout`): the partition of `global` (the model's table) under `opt`, the owned slots with their
/// state, and with expert parallelism the expert group: `expert_holders` when given (the ranks with
/// the same expert rank, ordered by replica: split(color = rank % M, key = rank), in the same
/// memory, host or device, as the communicator the step is given), else split from `world` (a
/// collective: every rank calls it). `held` is the rank's table (held_param_table, or
/// build_param_table with its ExpertShard) and must outlive the result. Throws skew::Error when
/// the arena's plan is not this rank's (named state missing or of another size) or expert_holders
/// is not of world_size / M ranks at the rank's replica.
std::unique_ptr<ZeroOptimizer> make_zero_optimizer(const OptimizerConfig& opt, const ParamTable& global,
                                                   const ParamTable& held, const ParallelLayout& layout,
                                                   const Arena& arena, Communicator& world,
                                                   Communicator* expert_holders = nullptr);

/// One ZeRO-1 step: `runner` steps z.slots.owned (the optimizer's arithmetic on this rank's ranges
/// only); with `idle` non-empty (train.idle_experts: skip, the idle list of the step's summed
/// token counts, the same on every rank) the owned slices of those experts keep their weights and
/// state; then zero_allgather_weights. Collective: every rank calls it with the same step.
void zero_optimizer_step(ZeroOptimizer& z, OptimizerRunner& runner, const OptimStep& step, Backend& backend,
                         const OptimizerConfig& opt, const std::vector<IdleExpert>& idle, Communicator& world);

/// Gather the updated weights: every tensor's owners send their ranges to every rank holding it, in
/// place (a whole tensor: a broadcast from its owner; a bank: one allgatherv over the world, or over
/// z.expert_group with expert parallelism; the owned ranges of a tensor are contiguous and in rank
/// order). The weights are the arena's: a device arena with a host-memory communicator (MPI) is
/// staged through host copies of each tensor by `backend`; a device communicator (NCCL) gathers
/// in place.
void zero_allgather_weights(ZeroOptimizer& z, Communicator& world, Backend& backend);

/// Sum each expert's token count over the ranks (an allreduce), so that every rank finds the same
/// idle experts for the step (an expert is idle when no rank routed a token to it).
void allreduce_expert_tokens(ExpertTokenCounts& counts, Communicator& world);

}  // namespace skew
