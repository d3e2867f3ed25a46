// One optimizer's run in progress inside `skew train` (train/trainer.cpp opens, steps and closes
// it): its session, the optimizer over it, the trainer state, metrics, batch streams and the run's
// files. Internal to train/.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_checkpoint.h"
#include "data/batch_stream.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_runner.h"
#include "runtime/backend_registry.h"
#include "runtime/session.h"
#include "train/data_parallel.h"
#include "train/faults.h"
#include "train/metrics.h"
#include "train/optimizer_phase.h"
#include "train/run_writes.h"
#include "train/status_line.h"
#include "train/trainer.h"
#include "train/zero_step.h"

namespace skew {

using Clock = std::chrono::steady_clock;

/// Seconds from t0 to now (steady clock).
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The session of one optimizer's run: this rank's table bound, the plan sized from the whole
/// model's under ZeRO-1 (its partition needs every parameter), else from the rank's.
inline SessionSpec training_spec(const OptimizerConfig& opt, int64_t microbatch, const ParallelLayout& layout,
                                 const ParamTable& table, const ParamTable& global) {
    SessionSpec spec;
    spec.optimizer = &opt;
    spec.microbatch = microbatch;
    spec.layout = layout;
    spec.table = &table;
    spec.plan_table = layout.zero() ? &global : &table;
    return spec;
}

/// One optimizer's run in progress: its session (plan, arena, model; the backend's workspace binding
/// is undone when it goes, so the shared backend never keeps a pointer into a freed arena), the
/// optimizer over them, the trainer state and metrics, the batch streams and the run's files.
/// Built by open_run.
struct OptimizerRun {
    const Config& cfg;
    const OptimizerConfig& opt;
    const TrainOptions& opts;
    Backend& backend;
    RunWrites& writes;
    int64_t mb = 0, accum = 0;         // sequences per microbatch; microbatches per global batch (all ranks)
    const ParamTable& table;           // this rank's (expert parallel: its n_experts / M experts of each bank)
    ParamTable global;                 // the whole model's (build_param_table(cfg.model)): ZeRO-1 and the checkpoints
    ParallelLayout layout;             // this rank's place: world size, ZeRO stage (docs/distributed.md)
    std::unique_ptr<Session> session;  // the plan, arena, model and the backend's workspace binding
    MemoryPlan& plan;
    Arena& arena;
    Model& model;
    std::vector<ParamSlot> slots;         // every parameter with its state; empty under ZeRO-1 (see zero)
    std::unique_ptr<ZeroOptimizer> zero;  // ZeRO-1 (layout.zero()): this rank's owned ranges and the gather
    ZeroPartition partition;              // who owns what (the sharded checkpoints' manifest)
    DataParallel dp;                      // this rank's share of each step and the collectives
    bool writer = true;                   // rank 0: writes the run folder, logs, draws the status line
    std::unique_ptr<OptimizerRunner>
        optimizer;  // declared after the session, so it goes first (the CUDA step drains the stream)
    std::vector<OptimizerStage> stages;  // the optimizer phase (train/optimizer_phase.h)
    TrainerState state;
    RunMetrics metrics;
    std::string last_dir, best_dir;
    StepLog log;
    data::BatchStream train, val;
    std::vector<int32_t> x, y;
    int64_t warmup = 0;
    SkipPolicy policy;
    StatusLine status;
    int64_t optimizer_t = 0;       // steps the optimizer has taken (skipped steps excluded)
    int64_t trailing_skipped = 0;  // steps skipped in a row up to the latest one
    int64_t device_peak = 0;       // measured peak device memory (device backends)
    double last_val_ppl = std::nan("");
    double since_eval_seconds = 0;
    int64_t since_eval_tokens = 0;
    Clock::time_point run_start;
    double wall_before = 0;

    OptimizerRun(const Config& c, const OptimizerConfig& o, const TrainOptions& to, Backend& be, RunWrites& w,
                 const ParamTable& table, int64_t microbatch)
        : cfg(c), opt(o), opts(to), backend(be), writes(w), mb(microbatch), accum(c.train.batch_size / microbatch),
          table(table), global(build_param_table(c.model)),
          layout(parallel_layout(c, to.comm->world_size(), to.comm->rank())),
          session(open_session(c, be, training_spec(o, microbatch, layout, table, global))), plan(session->plan),
          arena(session->arena), model(session->model), dp(dp_make(*to.comm, c, microbatch)), writer(dp.rank == 0) {
        // ZeRO-1 and the sharded checkpoints partition the whole model's table under the layout
        // (held_param_table gives this rank's banks); the model and its slots use the rank's table
        partition = zero_partition(global, o, layout);
        if (layout.zero()) zero = make_zero_optimizer(o, global, table, layout, arena, *to.comm, to.expert_holders);
        else slots = arena_param_slots(o, table, arena);
        if (to.expert_comm) model_set_expert_comm(model, to.expert_comm);
        dp.expert_comm = to.expert_holders;
        dp.device_comm = to.device_comm;
        dp_plan_buckets(dp, model, c.parallel.bucket_mib);
        dp.overlap = c.parallel.overlap_grad_reduce;
        optimizer = make_optimizer_runner(opt, backend, arena);
        OptimizerPhaseParts parts{
            &opt, &backend, &model, optimizer.get(), &slots, zero.get(), to.device_comm ? to.device_comm : to.comm,
            &dp};
        stages = optimizer_stages(c, parts);
    }
    OptimizerRun(const OptimizerRun&) = delete;
    OptimizerRun& operator=(const OptimizerRun&) = delete;

    /// Measured peak: the device's memory in use, sampled after every step (device backends), or the
    /// process's peak resident set (host backends).
    int64_t measured_peak() const { return backend.device_memory() ? device_peak : process_peak_rss_bytes(); }

    /// One process: checkpoint.h's folder. Several ranks: a sharded checkpoint (each rank its
    /// optimizer state, rank 0 the weights and layout.json; checkpoint/sharded_checkpoint.h).
    void checkpoint(const std::string& dir) {
        state.extra["optimizer_t"] = optimizer_t;
        dp_check_weights_agree(dp, model, backend, "at a checkpoint");
        if (writer) sync_step_log(log);
        if (layout.world_size > 1)
            save_sharded_checkpoint(dir, arena, state, &backend, layout, partition, global, *opts.comm);
        else save_checkpoint(dir, arena, state, &backend);
        writes.committed = true;
    }

    // The status line and step log are rank 0's.
    void status_msg(const std::string& m) {
        if (writer) status_message(status, m);
    }
    void status_warn(const std::string& m) {
        if (writer) status_warning(status, m);
    }
    void log_step(const StepRecord& rec) {
        if (writer) append_step(log, rec);
    }

    RunTotals totals() const {
        return RunTotals{state.step, state.skipped_steps, state.tokens_seen, state.train_seconds,
                         wall_before + seconds_since(run_start)};
    }
};

}  // namespace skew
