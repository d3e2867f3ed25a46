// Run metrics: the per-evaluation history and summary of one optimizer's run
// (metrics_<optimizer>.json, the data behind the paper's Table 1, Figures 2-3 and Appendix C) and
// the per-step JSONL log (steps_<optimizer>.jsonl). Both survive interruption: the JSON is written
// atomically, the log is appended a whole line at a time and trimmed to the checkpoint on resume.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/memory_plan.h"

namespace skew {

constexpr double NO_VALUE = std::numeric_limits<double>::quiet_NaN();  // "not measured": JSON null

/// One optimizer step, as the loop logs it (one line of steps_<optimizer>.jsonl).
struct StepRecord {
    int64_t step = 0;                  // 1-based optimizer step
    double lr = NO_VALUE;              // learning rate used at this step
    double lm_loss = NO_VALUE;         // mean LM cross-entropy over the step's batch (nats/token)
    double balance_loss = NO_VALUE;    // Switch balance loss, summed over MoE blocks
    double z_loss = NO_VALUE;          // router z-loss, summed over MoE blocks
    double grad_norm = NO_VALUE;       // global gradient L2 norm before clipping
    double tokens_per_sec = NO_VALUE;  // training tokens of this step / its wall time
    double step_ms = NO_VALUE;         // the step's wall time (batch read to the device idle after the update)
    double fwd_bwd_ms = NO_VALUE;      // batch read, gradients zeroed, forward + backward over every microbatch
    double grad_norm_ms = NO_VALUE;    // global grad-norm (and clipping) over the gradient region
    double optimizer_ms = NO_VALUE;    // the optimizer update, device idle after it (JSON null when skipped)
    bool skipped = false;              // no update: the loss or gradient was not finite
};

/// One evaluation (one entry of metrics_<optimizer>.json's history).
struct EvalRecord {
    int64_t step = 0;
    double train_lm_loss = NO_VALUE;     // training LM loss of this step's batch
    double aux_loss = NO_VALUE;          // balance_loss + z_loss of this step's batch
    double balance_loss = NO_VALUE;      // training balance loss of this step's batch
    double z_loss = NO_VALUE;            // training z-loss of this step's batch
    double val_loss = NO_VALUE;          // mean over the validation batches of each batch's mean loss
    double val_ppl = NO_VALUE;           // exp(val_loss)
    double val_balance_loss = NO_VALUE;  // balance loss on the validation batches (no router noise)
    double tokens_per_sec = NO_VALUE;    // training tokens / training seconds since the previous evaluation
    int64_t peak_memory_bytes = 0;       // measured peak so far (device peak counter, or host arena + RSS)
    double lr = NO_VALUE;                // learning rate of this step
    double grad_norm = NO_VALUE;         // grad norm of this step, before clipping
};

/// The summary of a run (final and best values).
struct MetricsSummary {
    double final_val_ppl = NO_VALUE;        // val_ppl of the last evaluation
    double best_val_ppl = NO_VALUE;         // lowest val_ppl of any evaluation
    int64_t best_val_step = 0;              // its step
    double final_balance_loss = NO_VALUE;   // val_balance_loss of the last evaluation (Table 1)
    double mean_tokens_per_sec = NO_VALUE;  // total_tokens / train_seconds
    int64_t total_tokens = 0;               // training tokens consumed (skipped steps included)
    double train_seconds = 0;               // time in training steps (no evaluation, no checkpoints)
    double wall_seconds = 0;                // wall time of the whole run, resumed parts summed
    int64_t steps = 0;                      // optimizer steps completed
    int64_t skipped_steps = 0;              // steps skipped for a NaN/inf
    int64_t stopped_at_step = 0;            // the step at which the run stopped on a fault (0: it did not)
    std::string stop_reason;                // why it stopped there (e.g. too many non-finite steps); "" if it did not
};

/// Everything metrics_<optimizer>.json holds.
struct RunMetrics {
    std::string optimizer;                             // OptimizerConfig::name
    std::string type;                                  // OptimizerConfig::type
    nlohmann::json config = nlohmann::json::object();  // the resolved config
    int64_t param_count = 0;
    int64_t state_bytes = 0;        // the plan's analytic optimizer state (all buffers)
    int64_t paper_state_bytes = 0;  // the paper's accounting of it (Table 1; differs for Muon)
    int64_t plan_peak_bytes = 0;    // the plan's predicted peak (arena size)
    /// Device backends: what the process holds outside the arena (CUDA context, library handles and
    /// workspaces), measured once at start-up as device memory in use less the arena (cudaMemGetInfo,
    /// whole device); -1 (JSON null) on host backends.
    int64_t device_overhead_bytes = -1;
    /// The constant skew plan adds for it (cuda_runtime_overhead_bytes); -1 on host backends.
    int64_t device_overhead_constant_bytes = -1;
    /// What skew plan predicts the run takes: plan_peak_bytes plus the constant on device backends
    /// (its "expected device total"), plan_peak_bytes on host backends. Compare with peak_memory_bytes.
    int64_t plan_bytes = 0;
    /// The OpenBLAS core this process's host matrix products ran on (openblas_get_corename, chosen
    /// at start-up: kernels/cpu/process_env.h); a resumed run: that of its latest part. "" in
    /// files written before it was recorded.
    std::string blas_core;
    double unigram_val_ppl = NO_VALUE;  // baseline: validation perplexity of the training split's
                                        // token frequencies (add-one smoothing); null if not computed
    int64_t peak_memory_bytes = 0;      // the largest measured peak of any evaluation
    std::vector<EvalRecord> history;
    MetricsSummary summary;
};

/// Totals the loop keeps while training, for summarize().
struct RunTotals {
    int64_t steps = 0;
    int64_t skipped_steps = 0;
    int64_t tokens = 0;
    double train_seconds = 0;
    double wall_seconds = 0;
};

/// The resolved config YAML (Config::resolved_yaml) as JSON: maps and lists kept, scalars typed
/// (integer, number, true/false, null, else string). Throws skew::Error on YAML that does not parse.
nlohmann::json config_to_json(const std::string& resolved_yaml);

/// A RunMetrics with the run's identity filled in: optimizer name and type, resolved config,
/// parameter count, analytic state and predicted peak from the plan, this process's OpenBLAS core.
/// History empty.
RunMetrics make_run_metrics(const Config& cfg, const OptimizerConfig& opt, const MemoryPlan& plan);

/// Append an evaluation and raise peak_memory_bytes to its measured peak.
void add_eval(RunMetrics& m, const EvalRecord& e);

/// Drop evaluations after `step` (a resume from a checkpoint at that step) and recompute
/// peak_memory_bytes over what remains.
void truncate_history(RunMetrics& m, int64_t step);

/// Peak resident memory of this process in bytes (VmHWM of /proc/self/status): the measured peak on
/// the CPU backend. 0 where /proc is not available.
int64_t process_peak_rss_bytes();

/// A derived value (perplexity, tokens/s, a ratio) as text for logs and tables: NaN (not
/// measured) as `missing`; +-inf (overflowed, e.g. the exp of a diverged loss) as "inf" / "-inf";
/// |v| >= 1e6 in exponent form ("1.234e+150"); else fixed with `decimals` decimals.
std::string metric_text(double v, int decimals, const std::string& missing = "-");

/// Whether a run diverged: its last evaluation's validation loss or perplexity overflowed, or its
/// validation loss exceeds twice that of a uniform guess over the vocabulary (2 ln vocab_size, from
/// the config's model.vocab_size).
bool run_diverged(const RunMetrics& m);

/// The summary of a history and the loop's totals: best_val_* from the lowest finite validation
/// loss (as the `best` checkpoint is chosen), whatever its perplexity.
MetricsSummary summarize(const std::vector<EvalRecord>& history, const RunTotals& totals);

/// metrics_<optimizer>.json content (state_gib etc. derived, GiB = 2^30 bytes; NaN, "not
/// measured", as null; +-inf, "overflowed", as the strings "inf" / "-inf").
nlohmann::json metrics_to_json(const RunMetrics& m);

/// Parse metrics JSON; `source` names the file in errors (missing key, wrong type).
RunMetrics metrics_from_json(const nlohmann::json& j, const std::string& source);

/// Write metrics_<optimizer>.json (RunFolder::metrics) into run_dir atomically (temp file, fsync, rename). Throws skew::Error.
void write_metrics(const std::string& run_dir, const RunMetrics& m);

/// Read a metrics file. Throws skew::Error naming the file (missing, not JSON, missing key).
RunMetrics read_metrics(const std::string& path);

// ---- per-step JSONL log

/// One JSONL line's object: step, lr, lm_loss, balance_loss, z_loss, grad_norm, tokens_per_sec,
/// step_ms, fwd_bwd_ms, grad_norm_ms, optimizer_ms, skipped.
nlohmann::json step_record_to_json(const StepRecord& r);

/// Parse one line's object; `source` names file and line in errors.
StepRecord step_record_from_json(const nlohmann::json& j, const std::string& source);

/// An open per-step log. Each append is one write(2) of a whole line, so an interrupted run leaves
/// at most one partial last line, which open_step_log drops.
struct StepLog {
    std::string path;
    int fd = -1;

    StepLog() = default;
    StepLog(const StepLog&) = delete;
    StepLog& operator=(const StepLog&) = delete;
    StepLog(StepLog&& o) noexcept;
    StepLog& operator=(StepLog&& o) noexcept;
    ~StepLog();
};

/// Open `path` for appending, first keeping only the complete lines whose step is <= keep_through
/// (rewritten atomically): 0 starts a fresh log, the checkpoint's step continues a resumed one.
/// Throws skew::Error naming the file and line of a complete line that does not parse.
StepLog open_step_log(const std::string& path, int64_t keep_through);

/// Append one record as a line. Throws skew::Error naming the file on a write failure.
void append_step(StepLog& log, const StepRecord& r);

/// fsync the log (call before a checkpoint and at exit). Throws skew::Error.
void sync_step_log(StepLog& log);

/// Read every complete line of a step log (a partial last line is ignored). Throws skew::Error
/// naming the file and line of a line that does not parse.
std::vector<StepRecord> read_step_log(const std::string& path);

}  // namespace skew
