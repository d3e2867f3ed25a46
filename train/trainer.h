// The training loop of `skew train` (paper Section 4, Appendix E): one initialization and one
// batch sequence shared by every optimizer of the run (the matched protocol), cosine schedule with
// warmup, microbatching with gradient accumulation, global grad-norm clipping, evaluation on fixed
// validation batches, metrics, checkpoints, resume, NaN/inf skipping and a clean stop on signals.
#pragma once
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "engine/config.h"

namespace skew {

struct TrainOptions {
    std::string run_dir;           // output folder (runtime.out_dir unless --out)
    bool resume = false;           // continue the run in run_dir from its last checkpoints
    bool force_plain_log = false;  // plain log lines even on a terminal
    int64_t stop_after_step = 0;   // testing/debugging: stop cleanly (checkpoint) after this step; 0 = off;
                                   // a resumed optimizer already at or past it stops before any step
    int64_t inject_nan_step = 0;   // testing: write a NaN into the router's gradient at this step; 0 = off
    int64_t profile_first = 0;     // --profile-steps A:B: cudaProfilerStart before step A (CUDA only); 0 = off
    int64_t profile_last = 0;      // ... and cudaProfilerStop after step B (>= A)
    Communicator* comm = nullptr;  // the run's ranks over host memory (dist/launch.h launch_world); null: one process
    int device = 0;                // the CUDA device of this rank (its local rank under mpirun)
    bool nccl = false;             // launched by MPI: the CUDA backend sums over NCCL (dist/nccl_communicator.h)
    /// parallel.expert M > 1 (set by train_all, docs/distributed.md "Expert parallel"): this rank's
    /// expert-parallel group (world ranks [g M, (g + 1) M)) and the ranks holding the same experts
    /// (world_rank % M equal).
    Communicator* expert_comm = nullptr;
    Communicator* expert_holders = nullptr;
    Communicator* device_comm = nullptr;  // set by train_all: NCCL over the ranks when nccl and the backend is CUDA
};

/// What one optimizer's run ended with.
struct TrainResult {
    std::string optimizer;
    int64_t steps_done = 0;
    double final_val_ppl = 0;    // val_ppl of the last evaluation (NaN before the first)
    int64_t last_eval_step = 0;  // the step of that evaluation; 0: no evaluation yet
    bool stopped = false;        // interrupted by a signal (or stop_after_step) with a checkpoint
};

/// Train every optimizer of cfg.train.optimizers in turn (paper Appendix E). Writes into
/// opts.run_dir: config.yaml (resolved), manifest.json (the shards'), metrics_<opt>.json,
/// steps_<opt>.jsonl, checkpoints/<opt>/{last,best}/. runtime.backend picks the backend: cpu;
/// cuda (arena in one cudaMalloc, CUDA optimizer step, measured peak = device memory in use);
/// auto (cuda when built with CUDA and a GPU is visible, else cpu). Throws skew::Error on bad data
/// (a token id >= model.vocab_size names its shard file and offset), a plan that does not fit, a
/// corrupt checkpoint on resume, a resume on data other than the run's (its manifest.json copy),
/// too many non-finite steps, runtime.backend: cuda without a GPU or a CUDA build, GaLore on CUDA,
/// or profile steps on the CPU. Everything checkable before training is checked before run_dir is
/// touched; a failure before the first checkpoint removes what this call wrote there.
/// With opts.comm over N > 1 ranks (docs/distributed.md): data parallel, rank r computing its
/// slice of every global batch; rank 0 alone writes the run folder, logs at info level and draws
/// the status line; every rank runs the pre-training checks and none starts while any failed.
/// Throws skew::Error also when train.batch_size is not a multiple of N x train.microbatch, or for
/// train.expert_grads: deferred (its expert gradients are never materialized to be summed).
std::vector<TrainResult> train_all(const Config& cfg, const TrainOptions& opts);

}  // namespace skew
