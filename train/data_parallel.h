// Data parallelism of `skew train` (docs/distributed.md): how one global batch splits over the
// ranks, and the collectives of a step: the gradient sum in buckets, the global loss parts and
// expert token counts, the stop decision and the weights' agreement. The trainer calls
// dp_arm_overlap before the step's last microbatch (the bucket sums then start during its
// backward), dp_reduce_gradients before the optimizer update (it starts what is left and waits)
// and dp_after_optimizer_step after it; ZeRO-1 (parallel.zero_stage 1) keeps the same gradient
// sums and replaces the update by its own step and all-gather (train/zero_step.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
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
    int64_t accum_steps = 1;  // microbatches per rank per step: batch_size / (world_size * microbatch)
    std::vector<GradBucket> buckets;
    double bucket_mib = 0;  // parallel.bucket_mib the buckets were planned with
    /// parallel.overlap_grad_reduce: start each bucket's sum during the last microbatch's backward
    /// (dp_arm_overlap). Off: every sum starts after the backward. The sums are the same either way.
    bool overlap = true;
    std::vector<int64_t> bucket_of;  // (Model::params) the bucket of each parameter, -1 for none

    // The reduction of one step (dp_arm_overlap, dp_reduce_gradients).
    /// A bucket's sum in flight: its communicator's ticket and, for a packed bucket, its staging slot.
    struct InFlight {
        size_t bucket = 0;
        Communicator* comm = nullptr;
        int64_t ticket = -1;
        int slot = -1;      // staging slot of a packed bucket, -1: summed in place
        bool done = false;  // waited for and unpacked
    };
    std::vector<InFlight> in_flight;
    std::vector<int64_t> waiting;  // (buckets) parameters of each bucket whose gradient is not complete
    size_t next_bucket = 0;        // the first bucket not started: sums start in bucket order on every rank
    /// Host copies of packed buckets (several small tensors, or a device arena under a host
    /// communicator): staging_slots slots of slot_bytes each, so that several can be in flight.
    std::vector<std::byte> staging;
    int64_t slot_bytes = 0;
    int staging_slots = 0;
    std::vector<int> slot_user;      // (staging_slots) index into in_flight using the slot, -1 free
    size_t started_in_backward = 0;  // buckets the last dp_reduce_gradients found started by the hook
    bool reported = false;           // the first reduction's summary was logged
};

/// Host staging slots of the packed buckets in flight at once (more wait for the oldest).
constexpr int DP_MAX_STAGING_SLOTS = 4;

/// The data-parallel group over `comm` for a run of `cfg` with `microbatch` sequences per forward
/// pass. Throws skew::Error naming train.batch_size, train.microbatch and the world size when
/// batch_size is not a multiple of world_size x microbatch, with the world sizes that work and,
/// for a new run, the train.microbatch or train.batch_size that would (under --resume, resume_run
/// not empty, those need a new run: config_change_hint).
DataParallel dp_make(Communicator& comm, const Config& cfg, int64_t microbatch, const std::string& resume_run = "");

/// Up to `most` world sizes (rank counts) that divide `n`, those nearest `near` first, in
/// ascending order: "1, 2 or 4" (the ranks over which n whole microbatches split evenly).
std::string world_size_choices(int64_t n, int64_t near, size_t most = 5);

/// Group the model's gradients into buckets of at most bucket_mib MiB (parallel.bucket_mib).
void dp_plan_buckets(DataParallel& dp, const Model& m, double bucket_mib);

/// Position in the global batch of this rank's local microbatch `m` (0 <= m < accum_steps):
/// rank r takes the contiguous sequences [r·B/N, (r+1)·B/N) of every global batch of B sequences,
/// so its microbatch m is global microbatch r·accum_steps + m. The router noise is keyed by this
/// index (model_forward_backward), so every rank count draws the single-process noise.
int64_t dp_global_microbatch(const DataParallel& dp, int64_t m);

/// Whether the bucket sums of this run can start during the backward (docs/distributed.md,
/// "Overlap with the backward pass"): parallel.overlap_grad_reduce, more than one rank (or a device
/// communicator), and not expert parallel over a device communicator (its all-to-all in the
/// backward would run NCCL on two communicators and two streams at once, which NCCL does not
/// promise to progress).
bool dp_overlap_applies(const DataParallel& dp, const Model& m);

/// Before the step's last microbatch: when dp_overlap_applies, set m.grads_done so that each
/// bucket's sum starts (Communicator::start_allreduce_sum, in bucket order) as soon as the backward
/// has completed every gradient of it. Earlier microbatches must run without it (their gradients
/// are not final). dp_reduce_gradients clears the hook.
void dp_arm_overlap(DataParallel& dp, Model& m, Backend& backend);

/// Sum every gradient buffer of `m` over the ranks, in place, bucket by bucket: fp32 gradients in
/// fp32 (MPI_SUM / ncclSum), bf16 gradients as bf16 with each pairwise sum formed in fp32 and
/// rounded to nearest even (dist/communicator.h). Starts the buckets dp_arm_overlap's hook has not
/// started and waits for all: on return (host arena) the sums are in place, or (device) the
/// backend's stream waits for them. Every bucket is one non-blocking sum per tensor (in place) or
/// of its packed host copy, whether or not the overlap ran, so the result is the same bits either
/// way. The summation order over ranks is the collective library's (Open MPI's, NCCL's ring or
/// tree), not the single process's microbatch order; every rank receives the same bits.
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
