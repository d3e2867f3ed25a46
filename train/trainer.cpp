// The training loop (paper Section 4 and Appendix E): every optimizer starts from the same
// initialization (Philox-keyed by the run seed) and reads the same batches in the same order
// (batch i of the training split at step i + 1); see trainer.h for what a run writes.
#include "train/trainer.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/sharded_checkpoint.h"
#include "data/batch_stream.h"
#include "data/prepare.h"
#include "data/resume_check.h"
#include "data/shard_identity.h"
#include "engine/arena.h"
#include "engine/config_hint.h"
#include "engine/config_schema.h"
#include "engine/dir_lock.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/process_env.h"
#include "kernels/cuda/nvtx.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_runner.h"
#include "plan/plan.h"
#include "runtime/backend_registry.h"
#include "runtime/session.h"
#include "train/data_parallel.h"
#include "train/deferred_experts.h"
#include "train/evaluation.h"
#include "train/faults.h"
#include "train/idle_experts.h"
#include "train/init_from.h"
#include "train/metrics.h"
#include "train/optimizer_phase.h"
#include "train/optimizer_run.h"
#include "train/preflight.h"
#include "train/process_groups.h"
#include "train/run_writes.h"
#include "train/schedule.h"
#include "train/signals.h"
#include "train/status_line.h"
#include "train/step_checks.h"
#include "train/zero_step.h"

namespace skew {
namespace {

namespace fs = std::filesystem;
using data::BatchStream;
using data::TokenSplit;
using data::batch_stream_check_ids;
using data::batch_stream_get;
using data::batch_stream_make;
using data::batch_stream_require;
using data::token_split_check_ids;
using data::token_split_check_manifest;
using data::token_split_read;
using data::token_split_open;

/// Reset the process's resident-memory high-water mark (Linux: "5" into /proc/self/clear_refs), so
/// that each optimizer's measured CPU peak is its own, not the largest of the runs before it.
void reset_peak_rss() {
    if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        std::fputs("5", f);
        std::fclose(f);
    }
}

/// Run one phase of a training step; an error inside it (a kernel's error word, a CUDA or shape
/// error) is rethrown naming the optimizer, the step and the phase.
template <typename F>
void at_step(const OptimizerConfig& opt, int64_t step, const char* phase, F&& f) {
    try {
        f();
    } catch (const Error& e) {
        fail("{}: step {} ({}): {}", opt.name, step, phase, e.what());
    }
}

/// Device backends: the start-up measurement of what the process holds outside the arena into the
/// run's metrics (device_overhead_bytes), with skew plan's constant and its expected device total.
template <class Run>
void synchronize_and_measure_overhead(Run& r) {
    r.backend.synchronize();
    r.metrics.device_overhead_bytes = std::max<int64_t>(0, r.backend.device_memory_used_bytes() - r.arena.bytes);
    r.metrics.device_overhead_constant_bytes = cuda_runtime_overhead_bytes(cuda_plan_major_version());
    r.metrics.plan_bytes = r.plan.peak_bytes + r.metrics.device_overhead_constant_bytes;
}

/// What an optimizer's run ended with: its steps and its last evaluation (none yet: step 0, NaN).
TrainResult train_result(const OptimizerConfig& opt, const OptimizerRun& r, bool stopped) {
    const std::vector<EvalRecord>& h = r.metrics.history;
    return TrainResult{opt.name, r.state.step, h.empty() ? NO_VALUE : h.back().val_ppl, h.empty() ? 0 : h.back().step,
                       stopped};
}

/// Open one optimizer's run: plan and arena, the model and optimizer over them, then resume from
/// the run's last checkpoint (--resume) or initialize the weights. Returns nullopt-like `done` when
/// the optimizer has nothing left to do (already finished, or --stop-after reached), with its result.
/// Otherwise opens the step log and batch streams for training from state.step + 1.
std::unique_ptr<OptimizerRun> open_run(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                       const TrainingData& data, const TrainOptions& opts, Backend& backend, int64_t mb,
                                       RunWrites& writes, std::optional<TrainResult>& done) {
    const TrainConfig& tc = cfg.train;
    const int64_t B = tc.batch_size, T = tc.seq_len;
    auto run = std::make_unique<OptimizerRun>(cfg, opt, opts, backend, writes, table, mb);
    OptimizerRun& r = *run;
    spdlog::info("{}: plan {:.3f} GiB (state {:.3f} GiB), microbatch {} x {} tokens, {} accumulation steps{}", opt.name,
                 double(r.plan.peak_bytes) / GIB, double(r.plan.state_bytes) / GIB, mb, T, r.dp.accum_steps,
                 r.dp.world_size > 1 ? fmt::format(" on each of {} ranks", r.dp.world_size) : std::string());

    const std::string& run_dir = opts.run_dir;
    const RunFolder folder{run_dir};
    r.last_dir = folder.checkpoint(opt.name, RunFolder::LAST);
    r.best_dir = folder.checkpoint(opt.name, RunFolder::BEST);
    const std::string hash = config_hash(cfg.resolved_yaml);
    r.state.optimizer = opt.name;
    r.state.seed = tc.seed;
    r.state.config_hash = hash;
    r.metrics = make_run_metrics(cfg, opt, r.plan);
    r.metrics.unigram_val_ppl = data.unigram_val_ppl;
    if (opts.resume && checkpoint_exists(r.last_dir)) {
        // a changed model key, named before any tensor is read (which would only say which one is missing)
        check_model_config(cfg, read_trainer_state(r.last_dir).model_config, folder.config(), r.last_dir,
                           "put config.yaml back as the run wrote it; another model needs a new run (skew train "
                           "CONFIG --out NEW_FOLDER)");
        r.state = r.layout.world_size > 1 ? load_sharded_checkpoint(r.last_dir, r.arena, &backend, r.layout,
                                                                    r.partition, r.global, *opts.comm)
                                          : load_checkpoint(r.last_dir, r.arena, &backend);
        if (!config_hash_matches(cfg, folder.config(), r.state.config_hash))
            fail(
                "{}: the checkpoint was written under another config than {} (config hash {} vs {}): was config.yaml "
                "edited after the run started, or the checkpoint copied from another run? Put config.yaml back as the "
                "run wrote it; other settings need a new run (skew train CONFIG --out NEW_FOLDER)",
                r.last_dir, folder.config(), r.state.config_hash, hash);
        check_trainer_state_counters(r.state, tc.seed, CheckpointFolder{r.last_dir}.trainer_state());
        if (fs::exists(folder.metrics(opt.name))) {
            r.metrics = read_metrics(folder.metrics(opt.name));
            truncate_history(r.metrics, r.state.step);
            r.metrics.unigram_val_ppl = data.unigram_val_ppl;
            r.metrics.blas_core = cpu::blas_core_name();  // this part's core
        }
        spdlog::info("{}: resuming from step {} ({})", opt.name, r.state.step, r.last_dir);
    } else {
        const std::string steps_file = folder.step_log(opt.name), metrics_file = folder.metrics(opt.name);
        if (opts.resume && (fs::exists(steps_file) || fs::exists(metrics_file))) {
            // Killed before its first checkpoint and first evaluation (e.g. a second Ctrl-C, kill -9):
            // nothing was kept but a few logged steps, which the same initialization and batches
            // reproduce, so it trains again from step 1. Anything more is refused, not thrown away.
            const fs::path opt_checkpoints = fs::path(r.last_dir).parent_path();
            std::error_code ec;
            const bool any_checkpoint = fs::exists(opt_checkpoints, ec) && !fs::is_empty(opt_checkpoints, ec);
            int64_t logged = 0;
            if (std::ifstream in(steps_file); in)
                for (std::string line; std::getline(in, line);) logged += line.empty() ? 0 : 1;
            if (!any_checkpoint && !fs::exists(metrics_file) && logged < std::min(tc.checkpoint_every, tc.eval_every)) {
                spdlog::warn(
                    "{}: --resume: stopped before its first checkpoint ({} logged steps); training it again from "
                    "step 1 (the same initialization and batches give the same steps)",
                    opt.name, logged);
            } else {
                fail(
                    "{}: --resume: {} has {}'s metrics or step log but no complete checkpoint in {} "
                    "(trainer_state.json, "
                    "model.safetensors, optimizer.safetensors); refusing to start it again from step 1 over its files "
                    "(to do that, remove {}, {} and {})",
                    opt.name, run_dir, opt.name, r.last_dir, steps_file, metrics_file, opt_checkpoints.string());
            }
        }
        if (!tc.init_from.empty()) {  // the imported weights instead of the initializer (train/init_from.h)
            load_init_weights(tc.init_from, r.arena, &backend);
            spdlog::info("{}: weights from {} (train.init_from), fresh optimizer state", opt.name, tc.init_from);
        } else {
            model_init(r.model, uint64_t(tc.seed));
        }
    }
    if (backend.device_memory()) {
        // What the process holds outside the arena, measured once the arena, the backend's handles
        // and the optimizer's exist (before the first step loads kernel modules): the device in use
        // less the arena, against the constant `skew plan` adds (docs/design.md "Deferred expert
        // gradients" and "One memory plan").
        synchronize_and_measure_overhead(r);
        spdlog::info(
            "{}: CUDA context and libraries {:.3f} GiB measured at start-up (device memory in use less the "
            "{:.3f} GiB arena); skew plan's CUDA {} constant is {:.3f} GiB, its expected device total {:.3f} GiB",
            opt.name, double(r.metrics.device_overhead_bytes) / GIB, double(r.arena.bytes) / GIB,
            cuda_plan_major_version(), double(r.metrics.device_overhead_constant_bytes) / GIB,
            double(r.metrics.plan_bytes) / GIB);
    }
    dp_check_weights_agree(r.dp, r.model, backend, "after initialization or resume");
    reset_peak_rss();
    if (r.state.step >= tc.steps) {
        spdlog::info("{}: already finished ({} steps)", opt.name, r.state.step);
        done = train_result(opt, r, false);
        return run;
    }
    if (opts.stop_after_step > 0 && r.state.step >= opts.stop_after_step) {
        spdlog::info(
            "{}: --stop-after {}: the checkpoint is at step {} already; stopping without a step (checkpoint "
            "unchanged)",
            opt.name, opts.stop_after_step, r.state.step);
        done = train_result(opt, r, true);
        return run;
    }

    if (r.writer) {
        writes.file(folder.step_log(opt.name));
        writes.file(folder.metrics(opt.name));
        writes.dir(folder.optimizer_checkpoints(opt.name));
        r.log = open_step_log(folder.step_log(opt.name), r.state.step);
    }
    // The model settings this run's checkpoints record (also over a resumed checkpoint from before they were kept).
    const auto model_values = config_section_values(cfg, "model");
    r.state.model_config = {model_values.begin(), model_values.end()};
    r.train = batch_stream_make(data.train, B, T, r.state.data_position);
    r.val = batch_stream_make(data.val, B, T, 0);
    batch_stream_require(r.val, tc.eval_batches, "train.eval_batches validation batches");
    if (r.train.num_batches < tc.steps)
        spdlog::warn(
            "{}: the training split holds {} distinct batches of {} x {} tokens for {} steps: batches repeat "
            "(the paper's protocol is one epoch without repeats)",
            cfg.data.dir, r.train.num_batches, B, T, tc.steps);
    r.x.assign(size_t(B * T), 0);
    r.y.assign(size_t(B * T), 0);
    r.warmup = warmup_steps(tc.steps, tc.warmup_frac);
    r.policy = SkipPolicy{tc.max_skipped_steps, r.state.skipped_steps};
    r.status = make_status_line(r.state.step, tc.log_every, opts.force_plain_log);
    const int64_t taken = r.state.step - r.state.skipped_steps;  // a checkpoint from before optimizer_t was kept
    r.optimizer_t =
        r.state.extra.is_object() ? json_int_or(r.state.extra, "optimizer_t", taken, "trainer state 'extra'") : taken;
    r.run_start = Clock::now();
    r.wall_before = r.metrics.summary.wall_seconds;
    return run;
}

/// One training step `step`: the batch, forward and backward over the microbatches, the gradient
/// norm and clip, the non-finite check, the optimizer update, the step log and the running totals.
/// Returns the step's record; throws skew::Error naming the step and phase (or when the skip
/// policy stops the run, after a checkpoint).
StepRecord train_step(OptimizerRun& r, int64_t step) {
    const TrainConfig& tc = r.cfg.train;
    const int64_t B = tc.batch_size, T = tc.seq_len;
    const OptimizerConfig& opt = r.opt;
    SKEW_NVTX_RANGE(fmt::format("step {}", step).c_str());
    const auto t0 = Clock::now();
    const double lr = cosine_lr(opt.lr, step, tc.steps, r.warmup, tc.min_lr_frac);
    at_step(opt, step, "batch", [&] {
        batch_stream_get(r.train, r.train.position, r.x.data(), r.y.data());
        batch_stream_check_ids(r.train, r.train.position, r.x.data(), r.y.data(), r.cfg.model.vocab_size);
        ++r.train.position;
    });
    double lm = 0, bal = 0, z = 0;
    ExpertTokenCounts expert_tokens;
    at_step(opt, step, "forward/backward", [&] {
        model_zero_grads(r.model);
        // this rank's microbatches of the global batch; gradients and losses scaled by the global
        // microbatch count, so that their sums over the ranks are the global means
        for (int64_t m = 0; m < r.dp.accum_steps; ++m) {
            const int64_t g = dp_global_microbatch(r.dp, m);
            // the last microbatch completes the gradients: its backward starts the bucket sums
            if (m + 1 == r.dp.accum_steps) dp_arm_overlap(r.dp, r.model, r.backend);
            LossParts p = model_forward_backward(r.model, r.x.data() + g * r.mb * T, r.y.data() + g * r.mb * T, g,
                                                 uint32_t(step), r.accum, true);
            lm += p.lm_loss / double(r.accum);
            bal += p.balance_loss / double(r.accum);
            z += p.z_loss / double(r.accum);
            add_expert_tokens(expert_tokens, p.moe);
        }
        dp_reduce_gradients(r.dp, r.model, r.backend);
        double parts[3] = {lm, bal, z};
        dp_sum(r.dp, parts, 3);
        lm = parts[0], bal = parts[1], z = parts[2];
        dp_sum_expert_tokens(r.dp, expert_tokens);
        // Phase times by the host clock, each phase ending with the device idle: one synchronize
        // here (the grad-norm that follows reads its result back and would wait anyway), the
        // norm's read-back, and the synchronize after the update.
        r.backend.synchronize();
    });
    const auto t_fwd_bwd = Clock::now();
    if (step == r.opts.inject_nan_step) inject_nan_gradient(r.model);
    const double loss = lm + bal + z;
    double grad_norm = 0;
    float grad_scale = 1.0f;  // the clip coefficient, folded into the optimizer's read of G where it can be
    at_step(opt, step, "gradient norm", [&] {
        if (tc.grad_clip > 0 && optimizer_folds_grad_scale(opt)) {
            grad_norm = model_grad_norm(r.model);
            const double coef = tc.grad_clip / (grad_norm + 1e-6);  // clip_grad_norm_'s coefficient
            if (std::isfinite(grad_norm) && coef < 1.0) grad_scale = float(coef);
        } else {
            grad_norm = tc.grad_clip > 0 ? model_clip_gradients(r.model, tc.grad_clip) : model_grad_norm(r.model);
        }
    });
    const auto t_grad_norm = Clock::now();
    StepRecord rec;
    rec.step = step;
    rec.lr = lr;
    rec.lm_loss = lm;
    rec.balance_loss = bal;
    rec.z_loss = z;
    rec.grad_norm = grad_norm;
    if (step == 1) warn_zero_gradients(opt, r.arena, r.backend);
    if (auto fault = check_step_finite(step, loss, grad_norm, fault_scan_tensors(r.arena, r.backend), r.policy)) {
        ++r.trailing_skipped;
        rec.skipped = true;
        r.state.skipped_steps = r.policy.skipped;
        if (fault->action == FaultAction::STOP) {
            r.log_step(rec);
            r.checkpoint(r.last_dir);
            // The metrics say the run stopped, where and why (`skew report` shows it, not "not run").
            r.metrics.summary = summarize(r.metrics.history, r.totals());
            r.metrics.summary.stopped_at_step = step;
            const std::string why = fault_message(*fault), prefix = fmt::format("step {}: ", step);
            r.metrics.summary.stop_reason = why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
            if (r.writer) {
                write_metrics(r.opts.run_dir, r.metrics);
                sync_step_log(r.log);
            }
            fail("{}: {}; stopped with the checkpoint of step {} in {}", opt.name, fault_message(*fault), r.state.step,
                 r.last_dir);
        }
        r.status_warn(fmt::format("{}: {}", opt.name, fault_message(*fault)));
    } else {
        r.trailing_skipped = 0;
        ++r.optimizer_t;
        OptimStep os;
        os.t = r.optimizer_t;
        os.lr = lr;
        os.seed = uint64_t(tc.seed);
        os.grad_scale = grad_scale;
        SKEW_NVTX_RANGE("optimizer");
        at_step(opt, step, "optimizer", [&] {
            run_optimizer_stages(r.stages, OptimizerStepInput{os, &expert_tokens});
        });
    }
    // the step's time is its device time; kernel errors surface here
    at_step(opt, step, "optimizer", [&] { r.backend.synchronize(); });
    const double dt = seconds_since(t0);
    if (r.backend.device_memory()) r.device_peak = std::max(r.device_peak, r.backend.device_memory_used_bytes());
    rec.tokens_per_sec = double(B * T) / dt;
    rec.step_ms = dt * 1e3;
    rec.fwd_bwd_ms = std::chrono::duration<double, std::milli>(t_fwd_bwd - t0).count();
    rec.grad_norm_ms = std::chrono::duration<double, std::milli>(t_grad_norm - t_fwd_bwd).count();
    if (!rec.skipped) rec.optimizer_ms = dt * 1e3 - rec.fwd_bwd_ms - rec.grad_norm_ms;
    r.log_step(rec);
    r.state.step = step;
    r.state.data_position = r.train.position;
    r.state.tokens_seen += B * T;
    r.state.train_seconds += dt;
    r.since_eval_seconds += dt;
    r.since_eval_tokens += B * T;
    return rec;
}

/// Evaluation after step `rec.step` (every train.eval_every steps and at the last): validation
/// loss on the fixed batches, the metrics file, and the best checkpoint when the loss improved
/// (record_validation).
void evaluate_step(OptimizerRun& r, const StepRecord& rec) {
    const TrainConfig& tc = r.cfg.train;
    const int64_t step = rec.step;
    EvalResult ev;
    at_step(r.opt, step, "evaluation", [&] {
        ev = evaluate(r.model, r.dp, r.val, tc.eval_batches, tc.batch_size, r.mb, tc.seq_len, r.cfg.model.vocab_size,
                      r.x, r.y);
    });
    EvalRecord e;
    e.step = step;
    e.train_lm_loss = rec.lm_loss;
    e.aux_loss = rec.balance_loss + rec.z_loss;
    e.balance_loss = rec.balance_loss;
    e.z_loss = rec.z_loss;
    e.val_loss = ev.val_loss;
    e.val_ppl = std::exp(ev.val_loss);
    e.val_balance_loss = ev.val_balance_loss;
    e.tokens_per_sec = double(r.since_eval_tokens) / r.since_eval_seconds;
    e.peak_memory_bytes = r.measured_peak();
    e.lr = rec.lr;
    e.grad_norm = rec.grad_norm;
    add_eval(r.metrics, e);
    r.since_eval_seconds = 0;
    r.since_eval_tokens = 0;
    r.last_val_ppl = e.val_ppl;
    r.status_msg(fmt::format("{} step {}: val loss {:.4f}, val ppl {}, balance {:.5f}", r.opt.name, step, e.val_loss,
                             metric_text(e.val_ppl, 2), e.val_balance_loss));
    r.metrics.summary = summarize(r.metrics.history, r.totals());
    if (r.writer) write_metrics(r.opts.run_dir, r.metrics);
    if (record_validation(r.state, step, ev.val_loss)) r.checkpoint(r.best_dir);
}

/// Train one optimizer of the run from its checkpoint (or step 1) to train.steps, a stop signal
/// or --stop-after: open_run, then per step train_step, evaluate_step when due, the status line,
/// the profiler window and the last checkpoint.
TrainResult train_one(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, const TrainingData& data,
                      const TrainOptions& opts, Backend& backend, int64_t mb, RunWrites& writes) {
    const TrainConfig& tc = cfg.train;
    std::optional<TrainResult> done;
    std::unique_ptr<OptimizerRun> run = open_run(cfg, table, opt, data, opts, backend, mb, writes, done);
    if (done) return *done;
    OptimizerRun& r = *run;
    bool profiling = false, stopped = false;
    for (int64_t step = r.state.step + 1; step <= tc.steps; ++step) {
        if (step == opts.profile_first) {
            backend.synchronize();
            cuda::profiler_start();
            profiling = true;
            spdlog::info("{}: profiler capture started before step {}", opt.name, step);
        }
        const StepRecord rec = train_step(r, step);
        const bool last_step = step == tc.steps;
        if (step % tc.eval_every == 0 || last_step) evaluate_step(r, rec);
        Progress pr;
        pr.optimizer = opt.name;
        pr.step = step;
        pr.total_steps = tc.steps;
        pr.loss = rec.lm_loss + rec.balance_loss + rec.z_loss;
        pr.val_ppl = r.last_val_ppl;
        pr.tokens_per_sec = rec.tokens_per_sec;
        pr.lr = rec.lr;
        if (r.writer) status_update(r.status, pr);

        if (profiling && step == opts.profile_last) {
            backend.synchronize();
            cuda::profiler_stop();
            profiling = false;
            spdlog::info("{}: profiler capture stopped after step {}", opt.name, step);
        }

        // one decision for every rank (a signal may reach one rank only)
        const bool stop = dp_any(r.dp, stop_requested()) || (opts.stop_after_step > 0 && step >= opts.stop_after_step);
        if (step % tc.checkpoint_every == 0 || last_step || stop) r.checkpoint(r.last_dir);
        if (stop && !last_step) {
            stopped = true;
            r.status_msg(
                fmt::format("{}: stopped after step {}; checkpoint in {} (continue with skew train --resume {})",
                            opt.name, step, r.last_dir, opts.run_dir));
            break;
        }
    }
    if (profiling) {
        backend.synchronize();
        cuda::profiler_stop();
    }
    if (r.writer) status_finish(r.status);
    if (backend.device_memory())
        spdlog::info(
            "{}: measured peak device memory {:.3f} GiB (whole device), plan {:.3f} GiB (arena; with the "
            "CUDA context and libraries {:.3f} GiB: {:.3f} measured at start-up)",
            opt.name, double(r.device_peak) / GIB, double(r.plan.peak_bytes) / GIB, double(r.metrics.plan_bytes) / GIB,
            double(r.plan.peak_bytes + r.metrics.device_overhead_bytes) / GIB);
    r.metrics.summary = summarize(r.metrics.history, r.totals());
    if (r.writer) {
        write_metrics(opts.run_dir, r.metrics);
        sync_step_log(r.log);
    }
    refuse_trailing_skipped(opt, r.state.step, r.trailing_skipped);
    return train_result(opt, r, stopped);
}

/// Read a whole file ("" when it cannot be opened).
std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::vector<TrainResult> train_all(const Config& cfg, const TrainOptions& opts_in) {
    TrainOptions opts = opts_in;
    std::unique_ptr<Backend> backend;  // declared first: it outlives the device communicators
    ProcessGroups groups = make_process_groups(opts.comm, cfg);
    opts.comm = groups.world;
    opts.expert_comm = groups.expert_group.get();
    opts.expert_holders = groups.expert_holders.get();
    Communicator& comm = *opts.comm;
    const int world = comm.world_size();
    const bool writer = comm.rank() == 0;                            // rank 0 alone writes the run folder
    const std::string resume_run = opts.resume ? opts.run_dir : "";  // hints: a resume cannot change the config
    if (cfg.runtime.threads > 0) omp_set_num_threads(int(cfg.runtime.threads));
    const int64_t M = cfg.parallel.expert;
    ParamTable table = build_param_table(cfg.model, ExpertShard{M, comm.rank() % M});
    const RunFolder folder{opts.run_dir};
    const fs::path config_path = folder.config();
    DirLock run_lock;
    TrainingData data;
    Config run_cfg = cfg;
    std::vector<int64_t> microbatch;
    // Every check that can be made before training, before the run folder is touched: the data
    // (manifest, token ids, batch counts), the backend, --profile-steps, each optimizer's plan.
    // Every rank makes them; no rank goes on while any failed (its error names it).
    std::string failed;
    try {
        if (writer && !opts.resume && fs::exists(config_path))
            fail(
                "--out {}: the folder already holds a run (config.yaml); continue it with `skew train --resume {}` or "
                "choose another --out",
                opts.run_dir, opts.run_dir);
        // One writer per run folder: a second `skew train` on it (--resume twice) is refused at once.
        if (opts.resume) {
            if (writer) dir_lock(run_lock, opts.run_dir, RunFolder::LOCK_FILE, "skew train");
            data::check_resume_data(cfg.data.dir, opts.run_dir);
            check_resume_world_size(cfg, opts.run_dir, world);
        }
        refuse_deferred_on_ranks(cfg, world, resume_run);
        if (!opts.resume) check_init_from(cfg);  // a resumed run's optimizers that still start read it then
        data = open_training_data(cfg, opts.resume ? opts.run_dir : "", writer);
        backend = make_backend(cfg, opts.device, resume_run);
        if (writer && !backend->device_memory())
            spdlog::info("cpu: {} threads, {}", omp_get_max_threads(), cpu::blas_core_summary());
        if (opts.profile_first > 0 && !backend->device_memory())
            fail(
                "--profile-steps {}:{}: profiling brackets steps with cudaProfilerStart/Stop and needs the CUDA "
                "backend; "
                "this run uses the {} backend (runtime.backend: {})",
                opts.profile_first, opts.profile_last, backend->name(), cfg.runtime.backend);
        // Plan for the backend actually used (auto resolved); the run's identity (config.yaml, the
        // checkpoints' config hash) stays the config as written.
        run_cfg.runtime.backend = backend_choice_of(*backend);
        // train.microbatch 0 on N ranks: the largest that fits among the divisors of batch_size / N,
        // planned for this rank's layout (its ZeRO-1 share of the optimizer state)
        if (cfg.train.microbatch > 0)
            dp_make(comm, cfg, cfg.train.microbatch, resume_run);  // its message names all three
        const ParallelLayout layout = parallel_layout(run_cfg, world, comm.rank());
        // ZeRO-1 plans from the whole model's table (its partition cuts the non-expert state over all
        // ranks, each expert shard's over its holders); stage 0 from the rank's own
        const ParamTable global = build_param_table(cfg.model);
        for (const OptimizerConfig& opt : cfg.optimizers) {
            microbatch.push_back(
                check_optimizer_run(run_cfg, layout.zero() ? global : table, opt, *backend, layout, resume_run));
            dp_make(comm, cfg, microbatch.back(), resume_run);  // batch_size a multiple of world x microbatch
        }
    } catch (const Error& e) {
        if (world == 1) throw;
        failed = e.what();
    }
    if (world > 1) agree_before_training(comm, failed, microbatch);
    // CUDA under mpirun/srun: gradients summed by NCCL in device memory, on the backend's stream
    if (opts.nccl && backend->device_memory()) {
        process_groups_to_device(groups, cfg, *backend, opts.device);
        opts.device_comm = groups.device.get();
        opts.expert_comm = groups.expert_group.get();
        opts.expert_holders = groups.expert_holders.get();
    }

    RunWrites writes;
    if (!opts.resume && writer) {
        writes.dir(opts.run_dir);
        std::error_code ec;
        fs::create_directories(opts.run_dir, ec);
        if (ec) fail("--out {}: cannot create the run folder: {}", opts.run_dir, ec.message());
        dir_lock(run_lock, opts.run_dir, RunFolder::LOCK_FILE, "skew train");
        if (fs::exists(config_path))  // another `skew train --out` on this folder finished meanwhile
            fail(
                "--out {}: the folder already holds a run (config.yaml); continue it with `skew train --resume {}` or "
                "choose another --out",
                opts.run_dir, opts.run_dir);
        writes.file(config_path);
        write_file_atomic(config_path.string(), cfg.resolved_yaml + "\n");
        writes.file(folder.data_identity());
        write_file_atomic(folder.data_identity(), json_text(data::shard_identity({&data.train, &data.val})) + "\n");
        const fs::path manifest = fs::path(cfg.data.dir) / "manifest.json";
        if (fs::exists(manifest)) {
            const fs::path copy = folder.data_manifest();
            writes.file(copy);
            write_file_atomic(copy.string(), read_text(manifest));
        }
    }
    install_stop_handlers();
    std::vector<TrainResult> results;
    try {
        for (size_t i = 0; i < cfg.optimizers.size(); ++i) {
            results.push_back(
                train_one(run_cfg, table, cfg.optimizers[i], data, opts, *backend, microbatch[i], writes));
            if (results.back().stopped) break;
        }
    } catch (...) {
        restore_stop_handlers();
        // Failed before any checkpoint: take back what this invocation wrote, so that the same
        // command, fixed, can run again (or --resume start over) in this folder.
        if (!writes.committed && !(writes.files.empty() && writes.dirs.empty())) {
            run_lock.release();  // its file would keep the folder from being removed
            writes.undo();
            spdlog::info("train: failed before the first checkpoint; removed what this run wrote to {}", opts.run_dir);
        }
        throw;
    }
    restore_stop_handlers();
    return results;
}

}  // namespace skew
