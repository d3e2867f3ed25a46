// How one run is laid out over ranks (docs/distributed.md): world size, this rank, expert
// parallelism and the ZeRO stage. The memory plan, the ZeRO-1 partition, the sharded checkpoints
// and their manifest all read this one struct; the default is one process.
#pragma once
#include <cstdint>
#include <string>

namespace skew {

struct Config;

/// The layout of a run over ranks. Expert-parallel groups are consecutive ranks: rank r holds the
/// experts of expert rank r % expert_parallel (experts [er * E/M, (er + 1) * E/M)), and the ranks
/// with the same expert rank (r / M = 0 .. world_size/M - 1) are the replicas of that expert shard.
struct ParallelLayout {
    int64_t world_size = 1;       // ranks in the run
    int64_t rank = 0;             // this rank, [0, world_size)
    int64_t zero_stage = 1;       // 1: optimizer state and update partitioned (ZeRO-1); 0: replicated
    int64_t expert_parallel = 1;  // M: ranks that split each expert bank (divides world_size and n_experts)

    /// This rank's position in its expert-parallel group: which expert shard it holds.
    int64_t expert_rank() const { return rank % expert_parallel; }
    /// Ranks holding the same expert shard (the data-parallel group of the expert banks).
    int64_t expert_replicas() const { return world_size / expert_parallel; }
    /// This rank's index among them, [0, expert_replicas()).
    int64_t expert_replica() const { return rank / expert_parallel; }
    /// Whether the optimizer state is partitioned: ZeRO stage 1 on more than one rank.
    bool zero() const { return zero_stage >= 1 && world_size > 1; }
    /// "world size 4, expert parallel 2, ZeRO stage 1" for messages and manifests.
    std::string describe() const;
};

/// The layout of `rank` of `world_size` under cfg.parallel. Throws skew::Error naming the key when
/// world_size < 1, rank is outside it, parallel.expert does not divide world_size or
/// model.n_experts, or train.batch_size is not a multiple of world_size (each rank takes an equal
/// slice of every global batch).
ParallelLayout parallel_layout(const Config& cfg, int64_t world_size, int64_t rank);

}  // namespace skew
