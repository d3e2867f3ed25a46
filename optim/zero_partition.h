// ZeRO-1 of the tiered optimizer state (docs/distributed.md, "ZeRO-1"): which rank keeps the state
// of which parameter and computes its update. The unit of ownership is a whole matrix, or one
// expert matrix of a stacked bank (each expert matrix is its own W for every optimizer,
// docs/design.md "Optimizers"), so factored row/column statistics, Muon's Newton-Schulz and
// GaLore's projectors come out exactly as in one process. One pure function, one source.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "optim/optimizer.h"

namespace skew {

struct Arena;

/// A contiguous part of one parameter a rank owns: matrices (experts) [matrix_begin, matrix_end)
/// of a bank in the model's global expert numbering, or [0, 1) for any other tensor (the whole of
/// it). A bank whose update is not per expert (SkewAdam with a full or no second moment on the
/// experts tier: one update-RMS clip over the bank) is owned whole, [0, n_experts).
struct OwnedRange {
    uint32_t param = 0;        // ParamInfo::index in the model's (global) table
    int64_t matrix_begin = 0;  // first expert owned (0 for a whole tensor)
    int64_t matrix_end = 1;    // one past the last (1 for a whole tensor)
    int64_t state_bytes = 0;   // fp32 state of the range under the optimizer
};

/// Who owns what: for every rank, its owned ranges in table order. Deterministic given (table,
/// optimizer, world size, expert parallelism, ZeRO stage). Without ZeRO (stage 0 or one rank) every
/// rank owns everything it holds (all non-expert tensors and its expert shard).
struct ZeroPartition {
    int64_t world_size = 1;
    int64_t expert_parallel = 1;
    int64_t zero_stage = 1;
    std::vector<std::vector<OwnedRange>> owned;  // (world_size) ranges per rank, table order
    std::vector<int64_t> state_bytes;            // (world_size) sum of each rank's ranges

    /// The rank with the most state bytes (the lowest such rank): the one `skew plan` reports.
    int64_t largest_rank() const;
};

/// Partition the optimizer state of `table` (the model's global table) under `opt` for `layout`
/// (layout.rank is ignored: every rank's share is computed). The non-expert tensors, each whole,
/// in table order, and, for each expert shard, its experts of every bank in table then expert
/// order, are cut into contiguous runs by state bytes: unit i of a sequence of total T over R
/// ranks goes to rank floor((2 S_i + w_i) R / 2T) (S_i the bytes before it, w_i its own), so each
/// rank's share is within one unit of T / R and every tensor's owners are consecutive ranks in
/// rank order (one allgatherv per tensor gathers it). Non-expert tensors go over all world_size
/// ranks, an expert shard over the world_size / M ranks that hold it (rank = replica * M +
/// expert rank). Throws skew::Error when M does not divide the world size or a bank's expert count.
ZeroPartition zero_partition(const ParamTable& table, const OptimizerConfig& opt, const ParallelLayout& layout);

/// The part of `p` that `r` covers as a parameter of its own: same name, index, dtype, tier and
/// role; a bank's shape (matrix_end - matrix_begin, rows, cols). Its optimizer_param_state is the
/// owned state (each state of a bank is stored expert-major).
ParamInfo owned_param_info(const ParamInfo& p, const OwnedRange& r);

/// The owned parts of rank `rank` as a table (owned_param_info of each range, global indices kept):
/// what the rank's memory plan declares state and optimizer scratch for.
ParamTable owned_param_table(const ParamTable& table, const ZeroPartition& part, int64_t rank);

/// The parameters rank layout.rank holds (weights and gradients): the whole table, except that with
/// expert parallelism M each bank keeps its n_experts / M experts of layout.expert_rank(). Global
/// indices kept (they key the rounding noise).
ParamTable held_param_table(const ParamTable& table, const ParallelLayout& layout);

/// The first global expert of the bank `held` that this rank holds: 0 when it holds every expert
/// of the global bank `global`, else layout.expert_rank() * held.n_matrices().
int64_t held_first_expert(const ParamInfo& global, const ParamInfo& held, const ParallelLayout& layout);

/// The slot over owned range `r` carved out of `whole` (a slot over the rank's held tensor, as
/// arena_param_slots makes it, state not used): info = owned (from owned_param_info, kept alive
/// by the caller), weight and gradient at the first owned element, element_base the range's first
/// element in the global bank (whatever `whole` had) so the rounding noise (and GaLore's paper-form test matrices) equal
/// the one-process step's; state pointers cleared (bind them to the owned state). `first_held`:
/// held_first_expert of the tensor.
ParamSlot owned_slot(const ParamSlot& whole, const ParamInfo& owned, const OwnedRange& r, int64_t first_held);

/// The slots of one rank over its arena (allocated from its plan, build_memory_plan with the
/// layout): `whole` gets a slot per held parameter (weight and gradient, no state) in table
/// order; `owned` a slot per owned range with its state bound to the plan's "state.<param>.<kind>"
/// buffers (sized for the range). `owned_table` from owned_param_table must outlive the slots.
/// Throws skew::Error naming a missing buffer, or a plan whose state does not match the ranges.
struct ZeroSlots {
    std::vector<ParamSlot> whole;
    std::vector<ParamSlot> owned;
};
ZeroSlots zero_arena_slots(const OptimizerConfig& opt, const ParamTable& held_table, const ParamTable& owned_table,
                           const ParallelLayout& layout, const ParamTable& global_table, const ZeroPartition& part,
                           const Arena& arena);

}  // namespace skew
