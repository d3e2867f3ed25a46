// The training loop (paper Section 4 and Appendix E): every optimizer starts from the same
// initialization (Philox-keyed by the run seed) and reads the same batches in the same order
// (batch i of the training split at step i + 1); see trainer.h for what a run writes.
#include "train/trainer.h"

#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string_view>

#include "data/batch_stream.h"
#include "data/prepare.h"
#include "data/shard_identity.h"
#include <nlohmann/json.hpp>
#include "engine/arena.h"
#include "engine/checkpoint.h"
#include "engine/dir_lock.h"
#include "engine/error.h"
#include "engine/faults.h"
#include "engine/memory_plan.h"
#include "engine/metrics.h"
#include "engine/param_table.h"
#include "engine/schedule.h"
#include "engine/signals.h"
#include "engine/status_line.h"
#include "kernels/backend.h"
#include "kernels/cuda/nvtx.h"
#include "model/model.h"
#include "optim/optimizer.h"

#if defined(SKEW_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "optim/optimizer_cuda.h"
#endif

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
using Clock = std::chrono::steady_clock;

/// The lock file of a run folder (dir_lock), held while `skew train` writes it.
constexpr const char* RUN_LOCK_FILE = ".skew-train.lock";

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// The backend of runtime.backend: `cpu`; `cuda` (device 0; a clear error when this build has no
/// CUDA backend or no GPU is visible); `auto`, the CUDA backend when built with CUDA and a GPU is
/// visible, else the CPU.
std::unique_ptr<Backend> make_backend(const Config& cfg) {
    const std::string& b = cfg.runtime.backend;
    if (b == "cpu") return make_cpu_backend();
#if defined(SKEW_HAVE_CUDA)
    const int n_devices = cuda::device_count();
    if (b == "cuda") {
        if (n_devices == 0)
            fail("{}: runtime.backend: cuda, but no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                 "hides it; see nvidia-smi)\n--> HINT: use runtime.backend=cpu (or auto, which falls back to the CPU)",
                 cfg.source);
        return cuda::make_cuda_backend(0);
    }
    if (b == "auto") {
        if (n_devices > 0) return cuda::make_cuda_backend(0);
        spdlog::info("runtime.backend: auto: no CUDA device visible, training on the CPU backend");
        return make_cpu_backend();
    }
#else
    if (b == "cuda")
        fail("{}: runtime.backend: cuda, but this skew was built without the CUDA backend (-DSKEW_CUDA=OFF or no nvcc)"
             "\n--> HINT: rebuild with -DSKEW_CUDA=ON, or use runtime.backend=cpu", cfg.source);
    if (b == "auto") return make_cpu_backend();
#endif
    fail("{}: runtime.backend: unknown backend '{}' (expected cpu, cuda or auto)", cfg.source, b);
}

bool is_cuda(const Backend& backend) { return std::string_view(backend.name()) == "cuda"; }

/// Testing hook (--debug-inject-nan): element 0 of the last MoE block's router gradient (or the
/// last parameter's gradient in a dense model) becomes NaN, as a numerical fault would leave it.
void inject_nan_gradient(Model& m) {
    const ParamRef* target = &m.params.back();
    for (const ParamRef& p : m.params)
        if (p.info->role == Role::ROUTER) target = &p;
    if (target->grad.type == ScalarType::F32) {
        const float nan = std::nanf("");
        m.backend->copy_to_device(target->grad.data, &nan, sizeof(nan));
    } else {
        const bf16 nan = f32_to_bf16(std::nanf(""));
        m.backend->copy_to_device(target->grad.data, &nan, sizeof(nan));
    }
}

#if defined(SKEW_HAVE_CUDA)
/// What the CUDA path of one optimizer's run holds besides the arena: the optimizer step's
/// context (scratch from the arena's ws.optimizer, or a separate allocation when a tensor needs
/// more; a cuBLAS handle on the backend's stream), and the cuBLASLt workspace binding (the arena's
/// ws.library when the plan has one) and the backend's op scratch and widening buffer (the
/// arena's ws.cuda_scratch and ws.cuda_widen), undone on destruction so the shared backend never
/// keeps a pointer into a freed arena.
struct CudaRun {
    cuda::CudaBackend* backend = nullptr;
    CudaOptimContext ctx;
    void* extra_scratch = nullptr;
    bool bound_workspace = false;

    CudaRun(cuda::CudaBackend& be, const OptimizerConfig& opt, std::span<const ParamSlot> slots, const Arena& arena) {
        backend = &be;
        ctx.stream = be.stream();
        if (cublasCreate(&ctx.cublas) != CUBLAS_STATUS_SUCCESS)
            fail("{}: cublasCreate failed for the CUDA optimizer step", opt.name);
        cublasSetStream(ctx.cublas, ctx.stream);
        const MemoryPlan& plan = *arena.plan;
        const int64_t need = optimizer_cuda_scratch_bytes(opt, slots);
        const int wi = plan.find("ws.optimizer");
        const int64_t have = wi >= 0 ? plan.buffers[size_t(wi)].bytes() : 0;
        if (wi >= 0 && need <= have) {
            ctx.scratch = arena.ptr(wi);
            ctx.scratch_bytes = have;
        } else if (need > 0) {
            spdlog::warn("{}: the optimizer step needs {} bytes of device scratch, the plan's ws.optimizer holds {}; "
                         "allocating it outside the arena", opt.name, need, have);
            if (cudaMalloc(&extra_scratch, size_t(need)) != cudaSuccess) {
                cudaGetLastError();
                cublasDestroy(ctx.cublas);
                fail("{}: cudaMalloc of {} bytes of optimizer scratch failed", opt.name, need);
            }
            ctx.scratch = extra_scratch;
            ctx.scratch_bytes = need;
        }
        const int li = plan.find("ws.library");
        if (li >= 0) {
            be.set_matmul_workspace(arena.ptr(li), plan.buffers[size_t(li)].bytes());
            bound_workspace = true;
        }
        if (const int si = plan.find("ws.cuda_scratch"); si >= 0)
            be.set_scratch(arena.ptr(si), plan.buffers[size_t(si)].bytes());
        if (const int wi2 = plan.find("ws.cuda_widen"); wi2 >= 0)
            be.set_matmul_widen_buffer(static_cast<float*>(arena.ptr(wi2)), plan.buffers[size_t(wi2)].numel());
    }
    ~CudaRun() {
        cudaStreamSynchronize(ctx.stream);
        try {
            if (bound_workspace) backend->set_matmul_workspace(nullptr, 0);
            backend->set_scratch(nullptr, 0);
            backend->set_matmul_widen_buffer(nullptr, 0);
        } catch (...) {
        }
        if (ctx.cublas) cublasDestroy(ctx.cublas);
        if (extra_scratch) cudaFree(extra_scratch);
    }
    CudaRun(const CudaRun&) = delete;
    CudaRun& operator=(const CudaRun&) = delete;
};
#endif

/// Reset the process's resident-memory high-water mark (Linux: "5" into /proc/self/clear_refs), so
/// that each optimizer's measured CPU peak is its own, not the largest of the runs before it.
void reset_peak_rss() {
    if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
        std::fputs("5", f);
        std::fclose(f);
    }
}

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

/// Out-of-budget on the CPU backend: refuse before allocating when the plan's arena exceeds the
/// host's available memory, saying what the plan holds (the CUDA arena checks the device's free
/// memory itself).
void refuse_if_host_too_small(const MemoryPlan& plan, const OptimizerConfig& opt) {
    const int64_t avail = host_available_bytes();
    if (avail < 0 || plan.peak_bytes <= avail) return;
    fail("{}: the plan needs {:.2f} GiB (weights {:.2f}, gradients {:.2f}, optimizer state {:.2f}, activations "
         "{:.2f}, workspace {:.2f}) but this host has {:.2f} GiB available; see `skew plan` for a smaller microbatch or "
         "model", opt.name, double(plan.peak_bytes) / GIB, double(plan.weights_bytes) / GIB, double(plan.grads_bytes) / GIB,
         double(plan.state_bytes) / GIB, double(plan.activation_bytes) / GIB, double(plan.workspace_bytes) / GIB,
         double(avail) / GIB);
}

/// What a non-finite step scans for its first culprit: the weights first (a NaN weight makes every
/// gradient NaN, and the weight is the cause), then the gradients, each named as the plan names it.
std::vector<NamedTensor> fault_scan_tensors(const Arena& arena) {
    std::vector<NamedTensor> t = buffer_tensors(arena, BufferKind::WEIGHT);
    for (NamedTensor& g : buffer_tensors(arena, BufferKind::GRAD)) t.push_back(std::move(g));
    return t;
}

/// After a run's first step: warn naming every trainable tensor whose gradient is identically zero
/// (no gradient path: the loss does not depend on it, so training never changes it).
void warn_zero_gradients(const OptimizerConfig& opt, const Arena& arena) {
    const std::vector<std::string> zero = all_zero_tensors(buffer_tensors(arena, BufferKind::GRAD));
    if (!zero.empty())
        spdlog::warn("{}: after step 1 the gradient of {} is identically zero: no gradient path reaches {} (check the "
                     "model settings, e.g. top_k, or the loss coefficients)", opt.name, fmt::join(zero, ", "),
                     zero.size() == 1 ? "it" : "them");
}

/// A run whose last step(s) were skipped for non-finite values did not train to its end: throws
/// skew::Error naming the optimizer and the skipped steps (the checkpoint and metrics are written).
void refuse_trailing_skipped(const OptimizerConfig& opt, int64_t last_step, int64_t trailing_skipped) {
    if (trailing_skipped == 0) return;
    fail("{}: the run ended with {} step(s) skipped for non-finite values (steps {} to {}), so its last updates never "
         "happened; see the step log for the first non-finite tensor (lower the learning rate, or resume from the best "
         "checkpoint)", opt.name, trailing_skipped, last_step - trailing_skipped + 1, last_step);
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

/// Memory left out of a CUDA device's free memory when train.microbatch is 0: what cuBLAS/cuBLASLt
/// handles, kernel modules and the allocator take after the arena (not in the plan).
constexpr int64_t CUDA_AUTO_RESERVE_BYTES = int64_t(512) << 20;

/// train.microbatch 0: the largest divisor of train.batch_size whose plan fits the device: the
/// CUDA device's free memory less CUDA_AUTO_RESERVE_BYTES, or the host's available memory on the
/// CPU backend (the whole batch when that is unknown). Throws skew::Error naming the memory at
/// microbatch 1 when nothing fits.
int64_t auto_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, bool on_cuda) {
    int64_t budget = -1;
    const char* where = "the host's available memory";
#if defined(SKEW_HAVE_CUDA)
    if (on_cuda) {
        budget = cuda_device_free_bytes();
        if (budget >= 0) budget = std::max<int64_t>(0, budget - CUDA_AUTO_RESERVE_BYTES);
        where = "the CUDA device's free memory less 0.5 GiB";
    }
#endif
    if (!on_cuda) budget = host_available_bytes();
    if (budget < 0) return cfg.train.batch_size;
    const int64_t mb = largest_fitting_microbatch(cfg, table, opt, budget);
    if (mb == 0)
        fail("{}: train.microbatch 0 (the largest that fits): even microbatch 1 needs {:.2f} GiB but {} is {:.2f} GiB; "
             "see `skew plan --budget`", opt.name, double(build_memory_plan(cfg, table, opt, 1).peak_bytes) / GIB, where,
             double(budget) / GIB);
    spdlog::info("{}: train.microbatch 0: {} sequences, the largest divisor of batch_size {} whose plan fits {} "
                 "({:.2f} GiB)", opt.name, mb, cfg.train.batch_size, where, double(budget) / GIB);
    return mb;
}

struct Batches {
    TokenSplit train;
    TokenSplit val;
    double unigram_val_ppl = std::nan("");
};

/// The unigram baseline: perplexity on the validation split of the training split's token
/// frequencies with add-one smoothing over vocab_size tokens. Counts at most the first 100M
/// training tokens and scores at most the first 10M validation tokens (a baseline, not a metric
/// of the model), reading in 1M-token chunks. Every token it reads is checked against vocab_size:
/// throws skew::Error naming the split, the shard file and the token's offset in it
/// (token_split_check_ids) on an id the model cannot hold.
double unigram_val_perplexity(const TokenSplit& train, const TokenSplit& val, int64_t vocab_size) {
    const int64_t chunk = int64_t(1) << 20;
    std::vector<int32_t> buf(static_cast<size_t>(chunk));
    std::vector<double> counts(size_t(vocab_size), 1.0);
    double total = double(vocab_size);
    const int64_t n_train = std::min<int64_t>(train.starts.back(), 100'000'000);
    for (int64_t at = 0; at < n_train; at += chunk) {
        const int64_t n = std::min(chunk, n_train - at);
        token_split_read(train, at, n, buf.data());
        token_split_check_ids(train, at, buf.data(), n, vocab_size);
        for (int64_t i = 0; i < n; ++i) counts[size_t(buf[size_t(i)])] += 1.0, total += 1.0;
    }
    const int64_t n_val = std::min<int64_t>(val.starts.back(), 10'000'000);
    double nll = 0;
    int64_t scored = 0;
    for (int64_t at = 0; at < n_val; at += chunk) {
        const int64_t n = std::min(chunk, n_val - at);
        token_split_read(val, at, n, buf.data());
        token_split_check_ids(val, at, buf.data(), n, vocab_size);
        for (int64_t i = 0; i < n; ++i) {
            nll -= std::log(counts[size_t(buf[size_t(i)])] / total);
            ++scored;
        }
    }
    return scored > 0 ? std::exp(nll / double(scored)) : std::nan("");
}

/// Validation loss over the fixed validation batches: mean over batches of each batch's mean LM
/// loss (design.md, "Training protocol"), and the mean balance loss (no router noise).
struct EvalResult {
    double val_loss = 0;
    double val_balance_loss = 0;
};

EvalResult evaluate(Model& model, const BatchStream& val, int64_t eval_batches, int64_t batch_size, int64_t mb,
                    int64_t seq_len, int64_t vocab_size, std::vector<int32_t>& x, std::vector<int32_t>& y) {
    EvalResult r;
    const int64_t accum = batch_size / mb;
    for (int64_t i = 0; i < eval_batches; ++i) {
        batch_stream_get(val, i, x.data(), y.data());
        batch_stream_check_ids(val, i, x.data(), y.data(), vocab_size);
        double lm = 0, bal = 0;
        for (int64_t m = 0; m < accum; ++m) {
            LossParts p = model_eval(model, x.data() + m * mb * seq_len, y.data() + m * mb * seq_len);
            lm += p.lm_loss / double(accum);
            bal += p.balance_loss / double(accum);
        }
        r.val_loss += lm / double(eval_batches);
        r.val_balance_loss += bal / double(eval_batches);
    }
    return r;
}

/// The checks of one optimizer's run that need no allocation, made for every optimizer before the
/// run folder is created: GaLore on CUDA, the microbatch (train.microbatch, or the largest that
/// fits when 0) and, on the CPU backend, the plan against the host's available memory. Returns
/// the microbatch; throws skew::Error naming the optimizer.
int64_t check_optimizer_run(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, bool on_cuda) {
    if (on_cuda && (opt.type == "galore" || opt.type == "galore-paper"))
        fail("{}: optimizer type '{}' (GaLore) has no CUDA step yet; train it with runtime.backend=cpu", opt.name,
             opt.type);
    const int64_t mb = cfg.train.microbatch > 0 ? cfg.train.microbatch : auto_microbatch(cfg, table, opt, on_cuda);
    if (!on_cuda) refuse_if_host_too_small(build_memory_plan(cfg, table, opt, mb), opt);
    return mb;
}

/// What this invocation of `skew train` created in the run folder (files and folders that did not
/// exist before it), so that a run failing before any checkpoint can be taken back whole and the
/// same --out (or --resume) works again once the command is fixed. `committed` turns true with the
/// first checkpoint written; from then on the folder is a run to resume and nothing is removed.
struct RunWrites {
    std::vector<fs::path> files;
    std::vector<fs::path> dirs;  // outermost first
    bool committed = false;

    /// Note `path` as this invocation's unless it exists already; call before creating it.
    void file(const fs::path& path) {
        std::error_code ec;
        if (!fs::exists(path, ec)) files.push_back(path);
    }
    /// Note `dir` and its parents that do not exist yet as this invocation's (it creates them next,
    /// or save_checkpoint does).
    void dir(const fs::path& dir) {
        std::vector<fs::path> missing;
        std::error_code ec;
        fs::path start = dir.lexically_normal();
        if (start.filename().empty()) start = start.parent_path();  // "runs/x/"
        for (fs::path p = start; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
            missing.push_back(p);
            if (p == p.parent_path()) break;
        }
        dirs.insert(dirs.end(), missing.rbegin(), missing.rend());
    }
    /// Remove the noted files, then the noted folders innermost first, each only if empty.
    void undo() {
        std::error_code ec;
        for (const fs::path& f : files) fs::remove(f, ec);
        for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) fs::remove(*it, ec);  // fails (kept) when not empty
    }
};

TrainResult train_one(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, const Batches& data,
                      const TrainOptions& opts, Backend& backend, int64_t mb, RunWrites& writes) {
    const TrainConfig& tc = cfg.train;
    const int64_t B = tc.batch_size, T = tc.seq_len;
    const bool on_cuda = is_cuda(backend);
    const int64_t accum = B / mb;
    MemoryPlan plan = build_memory_plan(cfg, table, opt, mb);
    spdlog::info("{}: plan {:.3f} GiB (state {:.3f} GiB), microbatch {} x {} tokens, {} accumulation steps", opt.name,
                 double(plan.peak_bytes) / GIB, double(plan.state_bytes) / GIB, mb, T, accum);
#if defined(SKEW_HAVE_CUDA)
    Arena arena = on_cuda ? allocate_cuda_arena(plan) : allocate_host_arena(plan);
#else
    Arena arena = allocate_host_arena(plan);
#endif
    Model model = model_bind(cfg, table, arena, backend);

    std::vector<ParamSlot> slots = arena_param_slots(opt, table, arena);
#if defined(SKEW_HAVE_CUDA)
    std::unique_ptr<CudaRun> cuda_run;
    if (on_cuda) cuda_run = std::make_unique<CudaRun>(static_cast<cuda::CudaBackend&>(backend), opt, slots, arena);
#endif
    // Measured peak: the device's memory in use, sampled after every step (CUDA), or the process's
    // peak resident set (CPU).
    int64_t device_peak = 0;
    auto measured_peak = [&]() -> int64_t {
#if defined(SKEW_HAVE_CUDA)
        if (on_cuda) return device_peak;
#endif
        return process_peak_rss_bytes();
    };
    bool profiling = false;

    const std::string run_dir = opts.run_dir;
    const std::string last_dir = checkpoint_dir(run_dir, opt.name, "last");
    const std::string best_dir = checkpoint_dir(run_dir, opt.name, "best");
    const std::string hash = config_hash(cfg.resolved_yaml);

    TrainerState state;
    state.optimizer = opt.name;
    state.seed = tc.seed;
    state.config_hash = hash;
    RunMetrics metrics = make_run_metrics(cfg, opt, plan);
    metrics.unigram_val_ppl = data.unigram_val_ppl;
    if (opts.resume && checkpoint_exists(last_dir)) {
        state = load_checkpoint(last_dir, arena);
        if (state.config_hash != hash)
            fail("{}: the checkpoint was written by a run with another config (hash {} vs {}); resume with the run's own "
                 "config.yaml", last_dir, state.config_hash, hash);
        if (fs::exists(metrics_path(run_dir, opt.name))) {
            metrics = read_metrics(metrics_path(run_dir, opt.name));
            truncate_history(metrics, state.step);
            metrics.unigram_val_ppl = data.unigram_val_ppl;
        }
        spdlog::info("{}: resuming from step {} ({})", opt.name, state.step, last_dir);
    } else {
        const std::string steps_file = step_log_path(run_dir, opt.name), metrics_file = metrics_path(run_dir, opt.name);
        if (opts.resume && (fs::exists(steps_file) || fs::exists(metrics_file))) {
            // Killed before its first checkpoint and first evaluation (e.g. a second Ctrl-C, kill -9):
            // nothing was kept but a few logged steps, which the same initialization and batches
            // reproduce, so it trains again from step 1. Anything more is refused, not thrown away.
            const fs::path opt_checkpoints = fs::path(last_dir).parent_path();
            std::error_code ec;
            const bool any_checkpoint = fs::exists(opt_checkpoints, ec) && !fs::is_empty(opt_checkpoints, ec);
            int64_t logged = 0;
            if (std::ifstream in(steps_file); in)
                for (std::string line; std::getline(in, line);) logged += line.empty() ? 0 : 1;
            if (!any_checkpoint && !fs::exists(metrics_file) && logged < std::min(tc.checkpoint_every, tc.eval_every)) {
                spdlog::warn("{}: --resume: stopped before its first checkpoint ({} logged steps); training it again from "
                             "step 1 (the same initialization and batches give the same steps)", opt.name, logged);
            } else {
                fail("{}: --resume: {} has {}'s metrics or step log but no complete checkpoint in {} (trainer_state.json, "
                     "model.safetensors, optimizer.safetensors); refusing to start it again from step 1 over its files "
                     "(to do that, remove {}, {} and {})", opt.name, run_dir, opt.name, last_dir, steps_file, metrics_file,
                     opt_checkpoints.string());
            }
        }
        model_init(model, uint64_t(tc.seed));
    }
    reset_peak_rss();
    if (state.step >= tc.steps) {
        spdlog::info("{}: already finished ({} steps)", opt.name, state.step);
        return TrainResult{opt.name, state.step, metrics.summary.final_val_ppl, false};
    }
    if (opts.stop_after_step > 0 && state.step >= opts.stop_after_step) {
        spdlog::info("{}: --stop-after {}: the checkpoint is at step {} already; stopping without a step (checkpoint "
                     "unchanged)", opt.name, opts.stop_after_step, state.step);
        return TrainResult{opt.name, state.step, metrics.summary.final_val_ppl, true};
    }

    writes.file(step_log_path(run_dir, opt.name));
    writes.file(metrics_path(run_dir, opt.name));
    writes.dir(fs::path(run_dir) / "checkpoints" / opt.name);
    StepLog log = open_step_log(step_log_path(run_dir, opt.name), state.step);
    BatchStream train = batch_stream_make(data.train, B, T, state.data_position);
    BatchStream val = batch_stream_make(data.val, B, T, 0);
    batch_stream_require(val, tc.eval_batches, "train.eval_batches validation batches");
    if (train.num_batches < tc.steps)
        spdlog::warn("{}: the training split holds {} distinct batches of {} x {} tokens for {} steps: batches repeat "
                     "(the paper's protocol is one epoch without repeats)", cfg.data.dir, train.num_batches, B, T, tc.steps);
    std::vector<int32_t> x(size_t(B * T)), y(size_t(B * T));
    const int64_t warmup = warmup_steps(tc.steps, tc.warmup_frac);
    SkipPolicy policy{tc.max_skipped_steps, state.skipped_steps};
    StatusLine status = make_status_line(state.step, tc.log_every, opts.force_plain_log);
    int64_t optimizer_t = state.extra.value("optimizer_t", state.step - state.skipped_steps);
    double last_val_ppl = std::nan("");
    double since_eval_seconds = 0;
    int64_t since_eval_tokens = 0;
    const auto run_start = Clock::now();
    const double wall_before = metrics.summary.wall_seconds;
    bool stopped = false;
    int64_t trailing_skipped = 0;  // steps skipped in a row up to the latest one

    auto checkpoint = [&](const std::string& dir) {
        state.extra["optimizer_t"] = optimizer_t;
        sync_step_log(log);
        save_checkpoint(dir, arena, state);
        writes.committed = true;
    };

    for (int64_t step = state.step + 1; step <= tc.steps; ++step) {
        if (step == opts.profile_first && on_cuda) {
            backend.synchronize();
            cuda::profiler_start();
            profiling = true;
            spdlog::info("{}: profiler capture started before step {}", opt.name, step);
        }
        SKEW_NVTX_RANGE(fmt::format("step {}", step).c_str());
        const auto t0 = Clock::now();
        const double lr = cosine_lr(opt.lr, step, tc.steps, warmup, tc.min_lr_frac);
        at_step(opt, step, "batch", [&] {
            batch_stream_get(train, train.position, x.data(), y.data());
            batch_stream_check_ids(train, train.position, x.data(), y.data(), cfg.model.vocab_size);
            ++train.position;
        });
        double lm = 0, bal = 0, z = 0;
        at_step(opt, step, "forward/backward", [&] {
            model_zero_grads(model);
            for (int64_t m = 0; m < accum; ++m) {
                LossParts p = model_forward_backward(model, x.data() + m * mb * T, y.data() + m * mb * T, m,
                                                     uint32_t(step), accum, true);
                lm += p.lm_loss / double(accum);
                bal += p.balance_loss / double(accum);
                z += p.z_loss / double(accum);
            }
            // Phase times by the host clock, each phase ending with the device idle: one synchronize
            // here (the grad-norm that follows reads its result back and would wait anyway), the
            // norm's read-back, and the synchronize after the update.
            backend.synchronize();
        });
        const auto t_fwd_bwd = Clock::now();
        if (step == opts.inject_nan_step) inject_nan_gradient(model);
        const double loss = lm + bal + z;
        double grad_norm = 0;
        at_step(opt, step, "gradient norm", [&] {
            grad_norm = tc.grad_clip > 0 ? model_clip_gradients(model, tc.grad_clip) : model_grad_norm(model);
        });
        const auto t_grad_norm = Clock::now();
        if (step == 1) warn_zero_gradients(opt, arena);
        StepRecord rec;
        rec.step = step;
        rec.lr = lr;
        rec.lm_loss = lm;
        rec.balance_loss = bal;
        rec.z_loss = z;
        rec.grad_norm = grad_norm;
        if (auto fault = check_step_finite(step, loss, grad_norm, fault_scan_tensors(arena), policy)) {
            rec.skipped = true;
            ++trailing_skipped;
            state.skipped_steps = policy.skipped;
            if (fault->action == FaultAction::STOP) {
                append_step(log, rec);
                checkpoint(last_dir);
                fail("{}: {}; stopped with the checkpoint of step {} in {}", opt.name, fault_message(*fault), state.step,
                     last_dir);
            }
            status_warning(status, fmt::format("{}: {}", opt.name, fault_message(*fault)));
        } else {
            trailing_skipped = 0;
            ++optimizer_t;
            OptimStep os;
            os.t = optimizer_t;
            os.lr = lr;
            os.seed = uint64_t(tc.seed);
            SKEW_NVTX_RANGE("optimizer");
            at_step(opt, step, "optimizer", [&] {
#if defined(SKEW_HAVE_CUDA)
                if (on_cuda)
                    optimizer_step_cuda(opt, slots, os, cuda_run->ctx);
                else
#endif
                    optimizer_step(opt, slots, os);
            });
        }
        // the step's time is its device time; kernel errors surface here
        at_step(opt, step, "optimizer", [&] { backend.synchronize(); });
        const double dt = seconds_since(t0);
#if defined(SKEW_HAVE_CUDA)
        if (on_cuda) device_peak = std::max(device_peak, cuda_device_used_bytes());
#endif
        rec.tokens_per_sec = double(B * T) / dt;
        rec.step_ms = dt * 1e3;
        rec.fwd_bwd_ms = std::chrono::duration<double, std::milli>(t_fwd_bwd - t0).count();
        rec.grad_norm_ms = std::chrono::duration<double, std::milli>(t_grad_norm - t_fwd_bwd).count();
        if (!rec.skipped) rec.optimizer_ms = dt * 1e3 - rec.fwd_bwd_ms - rec.grad_norm_ms;
        append_step(log, rec);
        state.step = step;
        state.data_position = train.position;
        state.tokens_seen += B * T;
        state.train_seconds += dt;
        since_eval_seconds += dt;
        since_eval_tokens += B * T;

        const bool last_step = step == tc.steps;
        if (step % tc.eval_every == 0 || last_step) {
            EvalResult ev;
            at_step(opt, step, "evaluation", [&] {
                ev = evaluate(model, val, tc.eval_batches, B, mb, T, cfg.model.vocab_size, x, y);
            });
            EvalRecord e;
            e.step = step;
            e.train_lm_loss = lm;
            e.aux_loss = bal + z;
            e.balance_loss = bal;
            e.z_loss = z;
            e.val_loss = ev.val_loss;
            e.val_ppl = std::exp(ev.val_loss);
            e.val_balance_loss = ev.val_balance_loss;
            e.tokens_per_sec = double(since_eval_tokens) / since_eval_seconds;
            e.peak_memory_bytes = measured_peak();
            e.lr = lr;
            e.grad_norm = grad_norm;
            add_eval(metrics, e);
            since_eval_seconds = 0;
            since_eval_tokens = 0;
            last_val_ppl = e.val_ppl;
            status_message(status, fmt::format("{} step {}: val loss {:.4f}, val ppl {}, balance {:.5f}", opt.name, step,
                                               e.val_loss, metric_text(e.val_ppl, 2), e.val_balance_loss));
            RunTotals totals{state.step, state.skipped_steps, state.tokens_seen, state.train_seconds,
                             wall_before + seconds_since(run_start)};
            metrics.summary = summarize(metrics.history, totals);
            write_metrics(run_dir, metrics);
            if (std::isfinite(ev.val_loss) && ev.val_loss < state.best_val_loss) {
                state.best_val_loss = ev.val_loss;
                state.best_val_step = step;
                checkpoint(best_dir);
            }
        }
        Progress pr;
        pr.optimizer = opt.name;
        pr.step = step;
        pr.total_steps = tc.steps;
        pr.loss = loss;
        pr.val_ppl = last_val_ppl;
        pr.tokens_per_sec = rec.tokens_per_sec;
        pr.lr = lr;
        status_update(status, pr);

        if (profiling && step == opts.profile_last) {
            backend.synchronize();
            cuda::profiler_stop();
            profiling = false;
            spdlog::info("{}: profiler capture stopped after step {}", opt.name, step);
        }

        const bool stop = stop_requested() || (opts.stop_after_step > 0 && step >= opts.stop_after_step);
        if (step % tc.checkpoint_every == 0 || last_step || stop) checkpoint(last_dir);
        if (stop && !last_step) {
            stopped = true;
            status_message(status, fmt::format("{}: stopped after step {}; checkpoint in {} (continue with skew train --resume {})",
                                               opt.name, step, last_dir, run_dir));
            break;
        }
    }
    if (profiling) {
        backend.synchronize();
        cuda::profiler_stop();
    }
    status_finish(status);
    if (on_cuda)
        spdlog::info("{}: measured peak device memory {:.3f} GiB (whole device), plan {:.3f} GiB", opt.name,
                     double(device_peak) / GIB, double(plan.peak_bytes) / GIB);
    RunTotals totals{state.step, state.skipped_steps, state.tokens_seen, state.train_seconds,
                     wall_before + seconds_since(run_start)};
    metrics.summary = summarize(metrics.history, totals);
    write_metrics(run_dir, metrics);
    sync_step_log(log);
    refuse_trailing_skipped(opt, state.step, trailing_skipped);
    return TrainResult{opt.name, state.step, metrics.summary.final_val_ppl, stopped};
}

/// Read a whole file ("" when it cannot be opened).
std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// --resume: the data must be where and what it was. A relative data.dir that does not exist is
/// reported as relative to the current directory; when the run folder holds a manifest.json, the
/// data's own must exist and describe the same shards (manifest_first_difference).
void check_resume_data(const Config& cfg, const TrainOptions& opts) {
    const fs::path dir = cfg.data.dir;
    std::error_code ec;
    if (dir.is_relative() && !fs::exists(dir, ec))
        fail("--resume {}: data.dir {} is relative to the current directory ({}) and does not exist there; resume the "
             "run from the directory it was started in", opts.run_dir, cfg.data.dir, fs::current_path(ec).string());
    const fs::path run_copy = fs::path(opts.run_dir) / "manifest.json";
    if (!fs::exists(run_copy, ec)) return;  // started on shards without a manifest (llm.c's)
    const fs::path data_manifest = dir / "manifest.json";
    if (!fs::exists(data_manifest, ec))
        fail("--resume {}: the run was started on the data of {}, but {} has none: this is not the data the run was "
             "started with (restore it, or start a new run with --out)", opts.run_dir, run_copy.string(),
             data_manifest.string());
    const std::string run_manifest = read_text(run_copy);
    std::string diff;
    try {
        diff = data::manifest_first_difference(run_manifest, read_text(data_manifest));
    } catch (const Error& e) {
        fail("--resume {}: cannot compare {} with {}: {}", opts.run_dir, data_manifest.string(), run_copy.string(), e.what());
    }
    if (!diff.empty())
        fail("--resume {}: the data changed since the run started: {} differs from the run's copy {}: {}; resuming "
             "would train on other batches (restore the data, or start a new run with --out)", opts.run_dir,
             data_manifest.string(), run_copy.string(), diff);
    // The manifests agree; the shards themselves could still have been edited in place. Re-hash
    // them against the MD5s the run started with when that is cheap (<= 1 GiB of shards).
    constexpr int64_t REHASH_MAX_BYTES = int64_t(1) << 30;
    const auto manifest = nlohmann::json::parse(run_manifest, nullptr, false);
    if (manifest.is_discarded() || !manifest.contains("shards") || !manifest["shards"].is_array()) return;
    int64_t total = 0;
    for (const auto& s : manifest["shards"])
        if (s.is_object() && s.contains("file") && s["file"].is_string())
            total += int64_t(fs::file_size(dir / s["file"].get<std::string>(), ec));
    if (total > REHASH_MAX_BYTES) {
        spdlog::info("--resume: {:.1f} GiB of shards in {}: not re-hashed (only up to 1 GiB is)", double(total) / GIB,
                     cfg.data.dir);
        return;
    }
    for (const auto& s : manifest["shards"]) {
        if (!s.is_object() || !s.contains("file") || !s.contains("md5") || !s["file"].is_string() || !s["md5"].is_string())
            continue;
        const fs::path shard = dir / s["file"].get<std::string>();
        const std::string now = data::md5_file(shard.string()), then = s["md5"].get<std::string>();
        if (now != then)
            fail("--resume {}: shard {} changed since the run started (MD5 {} now, {} in the run's {}); resuming would "
                 "train on other batches (restore the data, or start a new run with --out)", opts.run_dir, shard.string(),
                 now, then, run_copy.string());
    }
}

}  // namespace

std::vector<TrainResult> train_all(const Config& cfg, const TrainOptions& opts) {
    if (cfg.runtime.threads > 0) omp_set_num_threads(int(cfg.runtime.threads));
    ParamTable table = build_param_table(cfg.model);
    const fs::path config_path = fs::path(opts.run_dir) / "config.yaml";
    if (!opts.resume && fs::exists(config_path))
        fail("--out {}: the folder already holds a run (config.yaml); continue it with `skew train --resume {}` or "
             "choose another --out", opts.run_dir, opts.run_dir);
    // One writer per run folder: a second `skew train` on it (--resume twice) is refused at once.
    DirLock run_lock;
    if (opts.resume) {
        dir_lock(run_lock, opts.run_dir, RUN_LOCK_FILE, "skew train");
        check_resume_data(cfg, opts);
    }

    // Every check that can be made before training, before the run folder is touched: the data
    // (manifest, token ids, batch counts), the backend, --profile-steps, each optimizer's plan.
    token_split_check_manifest(cfg.data.dir, cfg.data.separator, cfg.model.vocab_size, cfg.data.val_ratio);
    Batches data{token_split_open(cfg.data.dir, "train"), token_split_open(cfg.data.dir, "val")};
    if (opts.resume) data::shard_identity_check(opts.run_dir, cfg.data.dir, {&data.train, &data.val});
    data.unigram_val_ppl = unigram_val_perplexity(data.train, data.val, cfg.model.vocab_size);
    spdlog::info("data: unigram baseline (training-split token frequencies) has validation perplexity {:.1f}",
                 data.unigram_val_ppl);
    {
        const int64_t B = cfg.train.batch_size, T = cfg.train.seq_len;
        batch_stream_require(batch_stream_make(data.val, B, T, 0), cfg.train.eval_batches,
                             "train.eval_batches validation batches");
        batch_stream_make(data.train, B, T, 0);
    }
    std::unique_ptr<Backend> backend = make_backend(cfg);
    const bool on_cuda = is_cuda(*backend);
    if (opts.profile_first > 0 && !on_cuda)
        fail("--profile-steps {}:{}: profiling brackets steps with cudaProfilerStart/Stop and needs the CUDA backend; "
             "this run uses the {} backend (runtime.backend: {})", opts.profile_first, opts.profile_last, backend->name(),
             cfg.runtime.backend);
    // Plan for the backend actually used (auto resolved); the run's identity (config.yaml, the
    // checkpoints' config hash) stays the config as written.
    Config run_cfg = cfg;
    run_cfg.runtime.backend = backend->name();
    std::vector<int64_t> microbatch;
    for (const OptimizerConfig& opt : cfg.optimizers)
        microbatch.push_back(check_optimizer_run(run_cfg, table, opt, on_cuda));

    RunWrites writes;
    if (!opts.resume) {
        writes.dir(opts.run_dir);
        std::error_code ec;
        fs::create_directories(opts.run_dir, ec);
        if (ec) fail("--out {}: cannot create the run folder: {}", opts.run_dir, ec.message());
        dir_lock(run_lock, opts.run_dir, RUN_LOCK_FILE, "skew train");
        if (fs::exists(config_path))  // another `skew train --out` on this folder finished meanwhile
            fail("--out {}: the folder already holds a run (config.yaml); continue it with `skew train --resume {}` or "
                 "choose another --out", opts.run_dir, opts.run_dir);
        writes.file(config_path);
        write_file_atomic(config_path.string(), cfg.resolved_yaml + "\n");
        writes.file(fs::path(opts.run_dir) / data::kShardIdentityFile);
        data::shard_identity_record(opts.run_dir, {&data.train, &data.val});
        const fs::path manifest = fs::path(cfg.data.dir) / "manifest.json";
        if (fs::exists(manifest)) {
            const fs::path copy = fs::path(opts.run_dir) / "manifest.json";
            writes.file(copy);
            write_file_atomic(copy.string(), read_text(manifest));
        }
    }
    install_stop_handlers();
    std::vector<TrainResult> results;
    try {
        for (size_t i = 0; i < cfg.optimizers.size(); ++i) {
            results.push_back(train_one(run_cfg, table, cfg.optimizers[i], data, opts, *backend, microbatch[i], writes));
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
