// Experts that received no token in a step. The SkewAdam paper's released trainer (train.py;
// docs/sources.md, the paper's trainer) calls an expert only for the tokens routed to it and zeroes gradients
// with set_to_none, so an expert that got no token in any microbatch of a step keeps grad None and
// every optimizer there `continue`s past it: its weights and state stay exactly as they were. skew
// follows this by default (`train.idle_experts: skip`); `step` applies the update with the zero
// gradient instead (weight decay applies, moment and second-moment averages decay). See
// docs/optimizers.md, "Experts that got no token".
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "model/model.h"
#include "optim/optimizer.h"

namespace skew {

/// Token copies routed to each expert of each MoE block, summed over a step's microbatches.
struct ExpertTokenCounts {
    std::vector<int> blocks;                   // transformer block index of each MoE block
    std::vector<std::vector<int64_t>> counts;  // (n_moe_blocks)(n_experts)
};

/// Add one microbatch's routing statistics (LossParts::moe) to `c`.
void add_expert_tokens(ExpertTokenCounts& c, const std::vector<MoeStats>& moe);

struct IdleExpert;

/// The experts of `idle` (global indices) that `m` holds, as indices into its banks: all of them
/// in one process; under expert parallelism those in [rank E/M, (rank + 1) E/M) of the model's
/// expert-parallel group, shifted by rank E/M (docs/distributed.md "Expert parallel").
std::vector<IdleExpert> held_idle_experts(const std::vector<IdleExpert>& idle, const Model& m);

/// One expert matrix of one MoE block.
struct IdleExpert {
    int block = -1;
    int64_t expert = -1;
};

/// The experts whose summed count is 0, in block then expert order.
std::vector<IdleExpert> idle_experts(const ExpertTokenCounts& c);

/// Host copies of the idle experts' slices (weight and every bound optimizer state) of the expert
/// banks in `slots`, taken before the optimizer step and written back after it.
struct IdleExpertSnapshot {
    struct Piece {
        void* device = nullptr;        // where the slice lives (weight or state, backend memory)
        std::vector<std::byte> bytes;  // its contents before the step
    };
    std::vector<Piece> pieces;
};

/// Copy out the slices of `idle` experts from every expert bank (Role EXPERT_W1/W2/W3) in `slots`:
/// the expert's matrix of the weight and its 1/n_experts share of each bound state tensor (every
/// state of a bank is stored expert-major: optimizer_param_state). Throws skew::Error naming the
/// tensor when a state's size is not a multiple of n_experts.
IdleExpertSnapshot save_idle_experts(Backend& backend, const OptimizerConfig& opt, std::span<const ParamSlot> slots,
                                     const std::vector<IdleExpert>& idle);

/// Write the snapshot back (after the optimizer step): the idle experts end the step bit-identical
/// to how they began it.
void restore_idle_experts(Backend& backend, const IdleExpertSnapshot& snap);

}  // namespace skew
