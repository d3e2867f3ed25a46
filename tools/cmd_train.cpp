// skew train: config-driven training of every listed optimizer from one initialization on the
// same batches (paper Appendix E), with metrics, checkpoints, resume and a clean stop on signals.
#include <fmt/format.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "checkpoint/run_folder.h"
#include "dist/launch.h"
#include "engine/config.h"
#include "engine/error.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/log_output.h"
#include "train/signals.h"
#include "train/trainer.h"

namespace skew::tools {

namespace {

/// Parse --profile-steps "A:B" (1 <= A <= B, steps are 1-based) into (A, B); a single "A" means A:A.
/// Throws skew::Error naming the option on anything else.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text) {
    const size_t colon = text.find(':');
    const std::string a = text.substr(0, colon);
    const std::string b = colon == std::string::npos ? a : text.substr(colon + 1);
    auto number = [&](const std::string& s) -> int64_t {
        size_t used = 0;
        int64_t v = 0;
        try {
            v = std::stoll(s, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (s.empty() || used != s.size())
            fail("--profile-steps {}: expected A:B with step numbers A <= B (e.g. --profile-steps 10:12)", text);
        return v;
    };
    const int64_t first = number(a), last = number(b);
    if (first < 1 || last < first)
        fail("--profile-steps {}: expected 1 <= A <= B (steps are 1-based), got A = {}, B = {}", text, first, last);
    return {first, last};
}

}  // namespace

void register_train_command(CLI::App& app) {
    struct Args {
        std::string config;
        std::string optimizers;
        std::vector<std::string> overrides;
        std::string out;
        std::string resume;
        bool plain = false;
        int64_t stop_after = 0;
        int64_t inject_nan = 0;
        std::string profile_steps;
        std::string init_from;
    };
    auto a = std::make_shared<Args>();
    CLI::App* cmd =
        app.add_subcommand("train", "Train each optimizer in turn from one initialization on identical batches");
    cmd->add_option("config", a->config, "Experiment config (YAML); not needed with --resume");
    cmd->add_option("--optimizers", a->optimizers,
                    "Comma-separated optimizers, e.g. skewadam,adamw,lion,muon (default: train.optimizers)");
    cmd->add_option("--set", a->overrides, "Override a config key, e.g. --set train.steps=100 (repeatable)")
        ->take_all();
    cmd->add_option("--out", a->out, "Run folder (default: runtime.out_dir)");
    cmd->add_option("--resume", a->resume,
                    "Continue the run in this folder from its last checkpoints (reads its config.yaml)");
    cmd->add_option("--init-from", a->init_from,
                    "Start every optimizer from the weights of a folder `skew import` wrote (train.init_from), with "
                    "fresh optimizer state; the config's model section must equal the folder's config.yaml");
    cmd->add_flag("--plain", a->plain, "Plain log lines even on a terminal (no live status line, no colour)");
    cmd->add_option("--stop-after", a->stop_after,
                    "Stop cleanly with a checkpoint after this step (as SIGINT would); a resumed run already at or "
                    "past it stops at once, its checkpoint unchanged (>= 1)")
        ->check(int_at_least(1));
    cmd->add_option("--profile-steps", a->profile_steps,
                    "A:B — bracket steps A..B with cudaProfilerStart/Stop for `nsys profile "
                    "--capture-range=cudaProfilerApi` (CUDA backend only; docs/training.md, Profiling)");
    cmd->add_option("--debug-inject-nan", a->inject_nan, "Testing: put a NaN into the router's gradient at this step")
        ->check(CLI::NonNegativeNumber)
        ->group("Debug");
    cmd->callback([a, cmd] {
        if (cmd->count("--out") > 0 && a->out.empty())
            fail("--out: empty path; name the run folder, e.g. --out runs/tiny (without --out: runtime.out_dir)");
        if (cmd->count("--resume") > 0 && a->resume.empty())
            fail("--resume: empty path; name the run folder to continue");
        if (cmd->count("--optimizers") > 0 && a->optimizers.empty())
            fail("--optimizers: empty list; name at least one optimizer, e.g. --optimizers skewadam,adamw");
        if (!a->resume.empty() && (!a->overrides.empty() || !a->optimizers.empty()))
            fail(
                "--resume {}: continues the run exactly as its config.yaml says; --set and --optimizers are not "
                "allowed "
                "(start a new run with --out for other settings)",
                a->resume);
        if (!a->resume.empty() && cmd->count("--out") > 0)
            fail(
                "--resume {}: continues the run in that folder; --out {} is not allowed with it (a resumed run writes "
                "nowhere else; to start a new run in {}, give the config instead of --resume)",
                a->resume, a->out, a->out);
        const std::vector<std::string>& overrides = a->overrides;
        std::vector<FlagOverride> flag_overrides;
        if (cmd->count("--init-from") > 0) {
            if (a->init_from.empty()) fail("--init-from: empty path; name the folder `skew import` wrote");
            if (!a->resume.empty())
                fail("--resume {}: continues the run as its config.yaml says; --init-from is not allowed with it",
                     a->resume);
            flag_overrides.push_back({"--init-from " + a->init_from, "train.init_from=" + a->init_from});
        }
        if (!a->optimizers.empty())
            flag_overrides.push_back({"--optimizers " + a->optimizers, "train.optimizers=[" + a->optimizers + "]"});
        TrainOptions opts;
        opts.force_plain_log = a->plain;
        if (a->plain) log_to(stdout, false);  // plain lines: no live status line, no colour
        opts.stop_after_step = a->stop_after;
        opts.inject_nan_step = a->inject_nan;
        if (!a->profile_steps.empty()) {
            auto [first, last] = parse_profile_steps(a->profile_steps);
            opts.profile_first = first;
            opts.profile_last = last;
        }
        Config cfg;
        if (!a->resume.empty()) {
            if (!a->config.empty())
                fail("--resume {}: give either a config or --resume, not both (the run's config.yaml is used)",
                     a->resume);
            const std::string path = RunFolder{a->resume}.config();
            if (std::filesystem::exists(a->resume) && !std::filesystem::is_directory(a->resume))
                fail("--resume {}: is a file, not a run folder (give the folder `skew train --out` wrote)", a->resume);
            if (!std::filesystem::exists(path))
                fail("--resume {}: no config.yaml there; is it a skew run folder?", a->resume);
            cfg = load_config(path, overrides);
            opts.run_dir = a->resume;
            opts.resume = true;
        } else {
            if (a->config.empty()) throw CLI::RequiredError("config");
            cfg = load_config(a->config, overrides, flag_overrides);
            opts.run_dir = a->out.empty() ? cfg.runtime.out_dir : a->out;
        }
        // Under mpirun/srun: the run's ranks, one GPU per rank by local rank, and with runtime.threads 0
        // the node's cores shared among its ranks (docs/distributed.md).
        const LaunchInfo& info = launch_info();
        opts.comm = &launch_world();
        opts.device = info.local_rank;
        opts.nccl = info.mpi;
        if (cfg.runtime.threads == 0 && info.local_size > 1)
            omp_set_num_threads(launch_threads_per_rank(omp_get_num_procs(), info));
        auto results = train_all(cfg, opts);
        for (const auto& r : results) {
            // as skew report says it: no evaluation yet, or the step of the one the value is from
            const std::string val =
                r.last_eval_step == 0 ? std::string("no evaluation yet")
                : r.last_eval_step == r.steps_done
                    ? fmt::format("final val ppl {:.2f}", r.final_val_ppl)
                    : fmt::format("val ppl {:.2f} at the step-{} evaluation", r.final_val_ppl, r.last_eval_step);
            spdlog::info("{}: {} steps, {}{}", r.optimizer, r.steps_done, val,
                         r.stopped ? fmt::format(" (stopped; resume with skew train --resume {})", opts.run_dir) : "");
        }
        spdlog::info("run folder: {} (skew report {})", opts.run_dir, opts.run_dir);
        // Interrupted by a signal: the checkpoint is written; exit 128 + signal so scripts can tell.
        if (const int sig = stop_signal()) std::exit(128 + sig);
    });
}

}  // namespace skew::tools
