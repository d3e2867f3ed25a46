// Checks before training (train/preflight.h).
#include "train/preflight.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/sharded_checkpoint.h"
#include "data/shard_identity.h"
#include "engine/config_hint.h"
#include "engine/error.h"
#include "optim/optimizer_runner.h"
#include "plan/plan.h"
#include "runtime/backend_registry.h"
#include "train/evaluation.h"

namespace skew {

/// Bytes of memory the host can still give (MemAvailable of /proc/meminfo), or -1 if unknown.
int64_t host_available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    std::string unit;
    while (in >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return -1;
}

/// What to do when the plan does not fit: a smaller microbatch or model (see `skew plan`) in a new
/// run; under --resume (resume_run not empty), which keeps the config, a machine with more memory.
std::string smaller_plan_hint(const std::string& resume_run) {
    if (resume_run.empty()) return "see `skew plan` for a smaller microbatch or model";
    return fmt::format(
        "resume on a machine with more memory (a smaller microbatch or model needs a new run: skew "
        "train {}/config.yaml --set ... --out NEW_FOLDER, sized with `skew plan`; --resume keeps the run's "
        "config)",
        resume_run);
}

/// Out-of-budget on the CPU backend: refuse before allocating when the plan's arena exceeds the
/// host's available memory, saying what the plan holds (the CUDA arena checks the device's free
/// memory itself).
void refuse_if_host_too_small(const MemoryPlan& plan, const OptimizerConfig& opt, const std::string& resume_run) {
    const int64_t avail = host_available_bytes();
    if (avail < 0 || plan.peak_bytes <= avail) return;
    fail(
        "{}: the plan needs {:.2f} GiB (weights {:.2f}, gradients {:.2f}, optimizer state {:.2f}, activations "
        "{:.2f}, workspace {:.2f}) but this host has {:.2f} GiB available; {}",
        opt.name, double(plan.peak_bytes) / GIB, double(plan.weights_bytes) / GIB, double(plan.grads_bytes) / GIB,
        double(plan.state_bytes) / GIB, double(plan.activation_bytes) / GIB, double(plan.workspace_bytes) / GIB,
        double(avail) / GIB, smaller_plan_hint(resume_run));
}

/// train.microbatch 0: the largest divisor of train.batch_size whose plan fits the backend: a
/// device's free memory less DEVICE_AUTO_RESERVE_BYTES, or the host's available memory for a host
/// backend (the whole batch when that is unknown). Throws skew::Error naming the memory at
/// microbatch 1 when nothing fits.
int64_t auto_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, const Backend& backend,
                        const ParallelLayout& layout, const std::string& resume_run) {
    int64_t budget = -1;
    const char* where = "the host's available memory";
    if (backend.device_memory()) {
        budget = backend.device_memory_free_bytes();
        if (budget >= 0) budget = std::max<int64_t>(0, budget - DEVICE_AUTO_RESERVE_BYTES);
        where = "the device's free memory less 0.5 GiB";
    } else {
        budget = host_available_bytes();
    }
    if (budget < 0) return cfg.train.batch_size / layout.world_size;
    const int64_t mb = largest_fitting_microbatch(cfg, table, opt, budget, layout);
    if (mb == 0)
        fail(
            "{}: train.microbatch 0 (the largest that fits): even microbatch 1 needs {:.2f} GiB but {} is {:.2f} GiB; "
            "{}",
            opt.name, double(build_memory_plan(cfg, table, opt, 1, layout).peak_bytes) / GIB, where,
            double(budget) / GIB, smaller_plan_hint(resume_run));
    spdlog::info(
        "{}: train.microbatch 0: {} sequences, the largest divisor of batch_size {} whose plan fits {} "
        "({:.2f} GiB)",
        opt.name, mb, cfg.train.batch_size, where, double(budget) / GIB);
    return mb;
}

/// The checks of one optimizer's run that need no allocation, made for every optimizer before the
/// run folder is created: an optimizer the backend cannot run, the microbatch
/// (train.microbatch, or the largest that fits when 0) and, on a host backend, the plan against
/// the host's available memory. Returns
/// the microbatch; throws skew::Error naming the optimizer.
int64_t check_optimizer_run(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                            const Backend& backend, const ParallelLayout& layout, const std::string& resume_run) {
    require_optimizer_backend(opt, optimizer_support(backend));
    const int64_t mb =
        cfg.train.microbatch > 0 ? cfg.train.microbatch : auto_microbatch(cfg, table, opt, backend, layout, resume_run);
    if (!backend.device_memory())
        refuse_if_host_too_small(build_memory_plan(cfg, table, opt, mb, layout), opt, resume_run);
    return mb;
}

/// --resume on a world size other than the one its checkpoints were written with: refused first,
/// naming the command that resumes (the world size is the one layout setting a resume can change;
/// the batch and microbatch checks after it would otherwise propose config changes).
void check_resume_world_size(const Config& cfg, const std::string& run_dir, int world) {
    for (const OptimizerConfig& opt : cfg.optimizers) {
        const std::string dir = RunFolder{run_dir}.checkpoint(opt.name, RunFolder::LAST);
        const int64_t was = checkpoint_world_size(dir);
        if (was == 0 || was == world) continue;
        if (was == 1)
            fail(
                "--resume {}: {} was written by one process (world size 1); this run is world size {}: resume it with "
                "one process (skew train --resume {}, without mpirun), or `skew export` its weights",
                run_dir, dir, world, run_dir);
        fail(
            "--resume {}: {} is a sharded checkpoint of world size {}; this run is world size {}: resume it with the "
            "same world size (mpirun -np {} skew train --resume {}), or `skew export` its weights",
            run_dir, dir, was, world, was, run_dir);
    }
}

/// Whether `flag` holds on any rank of `comm`, and which ranks it holds on.
std::vector<int> ranks_where(Communicator& comm, bool flag) {
    std::vector<int32_t> all(size_t(comm.world_size()), 0);
    const int32_t mine = flag ? 1 : 0;
    comm.allgather(&mine, all.data(), 1, CommDType::I32);
    std::vector<int> out;
    for (int r = 0; r < comm.world_size(); ++r)
        if (all[size_t(r)]) out.push_back(r);
    return out;
}

void refuse_deferred_on_ranks(const Config& cfg, int world, const std::string& resume_run) {
    if (world == 1 || cfg.train.expert_grads != ExpertGrads::DEFERRED) return;
    fail(
        "train.expert_grads: deferred cannot run on {} ranks: its expert gradients are formed one expert at a "
        "time inside the optimizer step and never exist as a whole to be summed over the ranks; {}",
        world,
        !resume_run.empty()
            ? fmt::format("resume it with one process (skew train --resume {}, without mpirun), or {}", resume_run,
                          config_change_hint(cfg, "train.expert_grads", "stored", resume_run))
            : config_change_hint(cfg, "train.expert_grads", "stored", resume_run));
}

void agree_before_training(Communicator& comm, const std::string& failed, std::vector<int64_t>& microbatch) {
    const std::vector<int> bad = ranks_where(comm, !failed.empty());
    if (!failed.empty()) throw Error(failed);
    if (!bad.empty())
        fail(
            "stopped before training: rank(s) {} failed the checks before training (see their error); nothing was "
            "written",
            fmt::join(bad, ", "));
    for (int64_t& mb : microbatch) {
        std::vector<int64_t> all(static_cast<size_t>(comm.world_size()));
        comm.allgather(&mb, all.data(), 1, CommDType::I64);
        mb = *std::min_element(all.begin(), all.end());
    }
}

TrainingData open_training_data(const Config& cfg, const std::string& resume_run, bool writer) {
    const std::string vocab_advice =  // the imported weights fix model.vocab_size
        cfg.train.init_from.empty()
            ? std::string()
            : fmt::format(
                  "it is the vocabulary of the weights in {} (train.init_from): prepare the data with their "
                  "tokenizer (skew prepare --tokenizer {}/tokenizer)",
                  cfg.train.init_from, cfg.train.init_from);
    data::token_split_check_manifest(cfg.data.dir, cfg.data.separator, cfg.model.vocab_size, cfg.data.val_ratio,
                                     vocab_advice);
    TrainingData d{data::token_split_open(cfg.data.dir, "train"), data::token_split_open(cfg.data.dir, "val")};
    for (const data::TokenSplit* split : {&d.train, &d.val}) data::token_split_check_listed(cfg.data.dir, *split);
    if (!resume_run.empty()) data::shard_identity_check(resume_run, cfg.data.dir, {&d.train, &d.val});
    if (writer) {  // a figure of rank 0's metrics file
        d.unigram_val_ppl = unigram_val_perplexity(d.train, d.val, cfg.model.vocab_size);
        spdlog::info("data: unigram baseline (training-split token frequencies) has validation perplexity {:.1f}",
                     d.unigram_val_ppl);
    }
    const int64_t B = cfg.train.batch_size, T = cfg.train.seq_len;
    data::batch_stream_require(data::batch_stream_make(d.val, B, T, 0), cfg.train.eval_batches,
                               "train.eval_batches validation batches");
    data::batch_stream_make(d.train, B, T, 0);
    return d;
}

}  // namespace skew
