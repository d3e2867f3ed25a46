// The layout of a run over ranks (engine/parallel_layout.h).
#include "engine/parallel_layout.h"

#include <fmt/format.h>

#include "engine/config.h"
#include "engine/error.h"

namespace skew {

std::string ParallelLayout::describe() const {
    return fmt::format("world size {}, expert parallel {}, ZeRO stage {}", world_size, expert_parallel, zero_stage);
}

ParallelLayout parallel_layout(const Config& cfg, int64_t world_size, int64_t rank) {
    if (world_size < 1) fail("parallel layout: world size must be >= 1 (got {})", world_size);
    if (rank < 0 || rank >= world_size) fail("parallel layout: rank {} is outside world size {}", rank, world_size);
    ParallelLayout l;
    l.world_size = world_size;
    l.rank = rank;
    l.zero_stage = cfg.parallel.zero_stage;
    l.expert_parallel = cfg.parallel.expert;
    if (l.expert_parallel < 1 || world_size % l.expert_parallel != 0)
        fail("{}: parallel.expert ({}) must divide the world size ({})", cfg.source, l.expert_parallel, world_size);
    if (cfg.model.n_experts > 0 && cfg.model.n_experts % l.expert_parallel != 0)
        fail("{}: parallel.expert ({}) must divide model.n_experts ({})", cfg.source, l.expert_parallel,
             cfg.model.n_experts);
    if (cfg.train.batch_size % world_size != 0)
        fail(
            "{}: train.batch_size ({}) must be a multiple of the world size ({}): each rank takes an equal slice of "
            "every global batch",
            cfg.source, cfg.train.batch_size, world_size);
    if (world_size > 1 && cfg.train.expert_grads == ExpertGrads::DEFERRED)
        fail(
            "{}: train.expert_grads: deferred runs in one process only (each expert's gradient is formed inside the "
            "optimizer step from this rank's kept operands; the sum over ranks is not built); use "
            "train.expert_grads: stored with {} ranks",
            cfg.source, world_size);
    return l;
}

}  // namespace skew
