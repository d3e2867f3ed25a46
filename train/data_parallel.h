// Data parallelism of `skew train` (docs/distributed.md): how one global batch splits over the
// ranks, and the collectives of a step: the gradient sum in buckets, the global loss parts and
// expert token counts, the stop decision and the weights' agreement. The trainer calls exactly two
// functions around the optimizer update, dp_reduce_gradients before it and
// dp_after_optimizer_step after it; ZeRO-1 (parallel.zero_stage 1) replaces their bodies
// (reduce-scatter, then the all-gather of the updated weights) without touching the trainer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "engine/config.h"
#include "model/model.h"
#include "train/idle_experts.h"

namespace skew {

/// Consecutive parameters whose gradients one collective sums (same grad dtype, at most
/// parallel.bucket_mib unless one parameter alone is larger). Parameters in reverse table order,
/// the order the backward pass finishes them.
struct GradBucket {
    std::vector<size_t> params;  // indices into Model::params
    CommDType dtype = CommDType::F32;
    int64_t bytes = 0;
    bool experts = false;  // expert banks: summed over DataParallel::expert_comm (expert parallel)
};

/// The data-parallel group of one run and its per-step scratch. World size 1 (no launcher, or
/// `mpirun -np 1`) runs every function below as a no-op or a copy.
struct DataParallel {
    Communicator* comm = nullptr;  // the data-parallel ranks over host memory (every rank while parallel.expert is 1)
    Communicator* device_comm = nullptr;  // the same ranks over device memory (NCCL, CUDA backend); null: comm
    /// Expert parallel (docs/distributed.md, "Expert parallel"): the ranks that hold the same
    /// experts (world_rank % M equal, world_size / M of them), over device memory on CUDA. An
    /// expert bank's gradient is already the sum over its expert-parallel group's tokens (formed on
    /// the owner), so it is summed over this group only; nullptr: expert banks are summed like every
    /// other gradient.
    Communicator* expert_comm = nullptr;
    int rank = 0;
    int world_size = 1;
    int64_t accum_steps = 1;        // microbatches per rank per step: batch_size / (world_size * microbatch)
    std::vector<GradBucket> buckets;
    std::vector<std::byte> staging;  // host copy of a multi-parameter bucket
};

/// The data-parallel group over `comm` for a run with `microbatch` sequences per forward pass.
/// Throws skew::Error naming train.batch_size, train.microbatch and the world size when
/// batch_size is not a multiple of world_size x microbatch.
DataParallel dp_make(Communicator& comm, const TrainConfig& tc, int64_t microbatch);

/// Group the model's gradients into buckets of at most bucket_mib MiB (parallel.bucket_mib).
void dp_plan_buckets(DataParallel& dp, const Model& m, double bucket_mib);

/// Position in the global batch of this rank's local microbatch `m` (0 <= m < accum_steps):
/// rank r takes the contiguous sequences [r·B/N, (r+1)·B/N) of every global batch of B sequences,
/// so its microbatch m is global microbatch r·accum_steps + m. The router noise is keyed by this
/// index (model_forward_backward), so every rank count draws the single-process noise.
int64_t dp_global_microbatch(const DataParallel& dp, int64_t m);

/// Sum every gradient buffer of `m` over the ranks, in place, bucket by bucket: fp32 gradients in
/// fp32 (MPI_SUM / ncclSum), bf16 gradients as bf16 with each pairwise sum formed in fp32 and
/// rounded to nearest even (dist/communicator.h). The summation order over ranks is the
/// collective library's (Open MPI's, NCCL's ring or tree), not the single process's microbatch
/// order; every rank receives the same bits. The hook ZeRO-1 replaces by a reduce-scatter.
void dp_reduce_gradients(DataParallel& dp, Model& m, Backend& backend);

/// Make the ranks' weights consistent after the optimizer update. parallel.zero_stage 0: every
/// rank applied the same update to the same summed gradients, so nothing moves. The hook ZeRO-1
/// fills with the all-gather of each rank's updated partition.
void dp_after_optimizer_step(DataParallel& dp, Model& m, Backend& backend);

/// Sum `n` doubles over the ranks in place (loss parts: each rank's share is already divided by
/// the global microbatch count, so the sum is the global mean).
void dp_sum(DataParallel& dp, double* values, int64_t n);

/// Sum the expert token counts over the ranks: the global counts (idle-expert detection, routing
/// statistics).
void dp_sum_expert_tokens(DataParallel& dp, ExpertTokenCounts& c);

/// Whether `flag` holds on any rank (a stop request, a signal seen by one rank only).
bool dp_any(DataParallel& dp, bool flag);

/// FNV-1a checksum of every weight of `m` (host copies), compared over the ranks (expert parallel:
/// the expert banks over the ranks holding the same experts, expert_comm): throws
/// skew::Error naming the ranks whose weights differ from rank 0's (a rank that diverged; should
/// never happen, every rank applies the same update to the same bits). `when` names the moment in
/// the message. Skipped on device-memory backends (a whole-model copy to the host).
void dp_check_weights_agree(DataParallel& dp, Model& m, Backend& backend, const char* when);

}  // namespace skew
