// The checks of `skew train` made before any run folder is written or arena allocated
// (docs/training.md): the microbatch that fits (train.microbatch 0), the plan against the host's
// memory, a resume's world size, and what every rank agrees on.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "data/batch_stream.h"
#include "dist/communicator.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "kernels/backend.h"

namespace skew {

/// Bytes of memory the host can still give (MemAvailable of /proc/meminfo), or -1 if unknown.
int64_t host_available_bytes();

/// What to do when the plan does not fit: a smaller microbatch or model (see `skew plan`) in a new
/// run; under --resume (resume_run not empty), which keeps the config, a machine with more memory.
std::string smaller_plan_hint(const std::string& resume_run);

/// Out-of-budget on the CPU backend: refuse before allocating when the plan's arena exceeds the
/// host's available memory, saying what the plan holds (the CUDA arena checks the device's free
/// memory itself).
void refuse_if_host_too_small(const MemoryPlan& plan, const OptimizerConfig& opt, const std::string& resume_run);

/// Memory left out of a device's free memory when train.microbatch is 0: what library handles
/// (cuBLAS/cuBLASLt), kernel modules and the allocator take after the arena (not in the plan).
constexpr int64_t DEVICE_AUTO_RESERVE_BYTES = int64_t(512) << 20;

/// train.microbatch 0: the largest divisor of train.batch_size whose plan fits the backend: a
/// device's free memory less DEVICE_AUTO_RESERVE_BYTES, or the host's available memory for a host
/// backend (the whole batch when that is unknown). Throws skew::Error naming the memory at
/// microbatch 1 when nothing fits.
int64_t auto_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, const Backend& backend,
                        const ParallelLayout& layout, const std::string& resume_run);

/// The checks of one optimizer's run that need no allocation, made for every optimizer before the
/// run folder is created: an optimizer the backend cannot run, the microbatch
/// (train.microbatch, or the largest that fits when 0) and, on a host backend, the plan against
/// the host's available memory. Returns
/// the microbatch; throws skew::Error naming the optimizer.
int64_t check_optimizer_run(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                            const Backend& backend, const ParallelLayout& layout, const std::string& resume_run);

/// --resume on a world size other than the one its checkpoints were written with: refused first,
/// naming the command that resumes (the world size is the one layout setting a resume can change;
/// the batch and microbatch checks after it would otherwise propose config changes).
void check_resume_world_size(const Config& cfg, const std::string& run_dir, int world);

/// Whether `flag` holds on any rank of `comm`, and which ranks it holds on.
std::vector<int> ranks_where(Communicator& comm, bool flag);

/// train.expert_grads: deferred on more than one rank: refused (its expert gradients never exist
/// whole to be summed), with the hint a resume (resume_run not empty) or a new run can follow.
void refuse_deferred_on_ranks(const Config& cfg, int world, const std::string& resume_run);

/// After every rank's checks (collective): rethrows this rank's error (`failed` not empty), or
/// throws naming the ranks that failed; then gives every optimizer's microbatch the smallest any
/// rank chose (train.microbatch 0 may find different free memory; each is a divisor of
/// batch_size / N).
void agree_before_training(Communicator& comm, const std::string& failed, std::vector<int64_t>& microbatch);

/// The run's data, checked and opened: the manifest against the model and the split, both splits'
/// shards (as the manifest lists them; under a resume, `resume_run`'s record of them), enough
/// validation batches for train.eval_batches, and on the writer the unigram baseline.
struct TrainingData {
    data::TokenSplit train;
    data::TokenSplit val;
    double unigram_val_ppl = std::nan("");
};
TrainingData open_training_data(const Config& cfg, const std::string& resume_run, bool writer);

}  // namespace skew
