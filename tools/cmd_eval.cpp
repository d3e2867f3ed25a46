// skew eval CHECKPOINT_OR_RUN: score a trained checkpoint (docs/evaluation.md). --data: validation
// loss and perplexity over a prepared split, as the trainer's evaluation computes them; --task
// FILE --format NAME: zero-shot multiple choice as the LM Evaluation Harness scores PIQA,
// WinoGrande, HellaSwag and ARC (paper Appendix D, Table 9). Writes <run>/eval_<optimizer>.json
// (an import folder: IMPORT/eval_import.json).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "data/tokenizer.h"
#include "data/tokenizer_identity.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/process_env.h"
#include "eval/load.h"
#include "eval/perplexity.h"
#include "eval/scoring.h"
#include "eval/tasks.h"
#include "model/inference.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/log_output.h"

namespace skew::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct EvalArgs {
    std::string path;
    std::string optimizer;
    std::string which;
    std::string data_dir;
    std::string split = "val";
    int64_t batches = 0;
    std::vector<std::string> tasks;
    std::vector<std::string> formats;
    std::string tokenizer_dir;
    std::string backend = "auto";
    int64_t batch_size = 8;
    bool json_out = false;
    bool no_write = false;
    bool no_progress = false;
};

// A progress line on a terminal (stderr), nothing otherwise.
struct Progress {
    bool live = false;
    std::string what;
    void operator()(int64_t done, int64_t total) const {
        if (!live) return;
        std::fprintf(stderr, "\r%s %lld/%lld", what.c_str(), (long long)done, (long long)total);
        if (done == total) std::fprintf(stderr, "\n");
        std::fflush(stderr);
    }
};

json task_json(const eval::TaskResult& t) {
    return json{{"file", t.file},
                {"n", t.n},
                {"acc", t.acc.mean},
                {"acc_stderr", t.acc.standard_error},
                {"acc_norm", t.acc_norm.mean},
                {"acc_norm_stderr", t.acc_norm.standard_error},
                {"requests", t.requests},
                {"truncated_requests", t.truncated_requests}};
}

void run_eval(const EvalArgs& a) {
    log_to(stderr);  // stdout carries the results (--json) or the generated text
    if (a.data_dir.empty() && a.tasks.empty())
        fail("skew eval: nothing to evaluate; give --data DIR (perplexity) and/or --task FILE --format NAME");
    if (a.tasks.size() != a.formats.size())
        fail("skew eval: {} --task files but {} --format names; give one --format per --task, in the same order",
             a.tasks.size(), a.formats.size());
    std::vector<eval::TaskFormat> formats;
    for (const std::string& f : a.formats) formats.push_back(eval::task_format_from_name(f));
    if (a.batch_size < 1) fail("--batch-size {}: must be >= 1", a.batch_size);
    const eval::CheckpointRef ref = eval::resolve_checkpoint(a.path, a.optimizer, a.which);
    const bool live = !a.no_progress && !a.json_out && output_is_terminal(STDERR_FILENO);
    spdlog::info("eval: checkpoint {}", eval::checkpoint_label(ref));

    json out{{"checkpoint", ref.dir}, {"optimizer", ref.optimizer}, {"step", ref.step}, {"which", ref.which}};
    if (!a.data_dir.empty()) {
        const Config run_cfg = load_config(RunFolder{ref.run_dir}.config());
        const int64_t B = run_cfg.train.batch_size;
        const int64_t mb = run_cfg.train.microbatch > 0 ? run_cfg.train.microbatch : B;
        eval::check_data_tokenizer(ref, a.data_dir, "--data " + a.data_dir);
        auto lm = eval::load_model(ref, a.backend, mb, run_cfg.train.seq_len);
        out["backend"] = lm->backend->name();
        const eval::PerplexityResult p = eval::evaluate_perplexity(*lm->model, a.data_dir, a.split, B, a.batches,
                                                                   Progress{live, "perplexity: batch"});
        out["perplexity"] = json{{"data", a.data_dir},
                                 {"split", p.split},
                                 {"batches", p.batches},
                                 {"batch_size", B},
                                 {"seq_len", run_cfg.train.seq_len},
                                 {"tokens", p.tokens},
                                 {"loss", p.loss},
                                 {"perplexity", p.perplexity}};
        if (!a.json_out)
            fmt::print("perplexity ({} split, {} batches, {} tokens): loss {:.4f}, perplexity {:.2f}\n", p.split,
                       p.batches, p.tokens, p.loss, p.perplexity);
    }
    if (!a.tasks.empty()) {
        // every task file is read and checked before the model is loaded
        std::vector<std::vector<eval::McItem>> items;
        for (size_t i = 0; i < a.tasks.size(); ++i) items.push_back(eval::read_task_file(a.tasks[i], formats[i]));
        const Config run_cfg = load_config(RunFolder{ref.run_dir}.config());
        const data::Tokenizer tok = eval::load_run_tokenizer(ref, run_cfg, a.tokenizer_dir);
        const int64_t L = run_cfg.model.max_seq_len;
        auto lm = eval::load_model(ref, a.backend, a.batch_size, L);
        out["backend"] = lm->backend->name();
        for (size_t i = 0; i < a.tasks.size(); ++i) {
            const std::string name(choice_name(formats[i]));
            eval::TaskResult t;
            try {
                t = eval::score_task(
                    items[i], formats[i], tok, L + 1, a.batch_size,
                    [&](const std::vector<std::vector<int32_t>>& seqs) {
                        return model_token_logprobs(*lm->model, seqs);
                    },
                    Progress{live, name + ": request"});
            } catch (const Error& e) {
                fail("{}: {}", a.tasks[i], e.what());
            }
            t.file = a.tasks[i];
            if (t.truncated_requests > 0)
                spdlog::warn(
                    "{}: {} of {} requests were longer than the model's {} positions and lost context tokens "
                    "on the left",
                    a.tasks[i], t.truncated_requests, t.requests, L);
            out["tasks"][name] = task_json(t);
            if (!a.json_out)
                fmt::print("{:<11} n {:>6}  acc {:.4f} ± {:.4f}  acc_norm {:.4f} ± {:.4f}{}\n", name, t.n, t.acc.mean,
                           t.acc.standard_error, t.acc_norm.mean, t.acc_norm.standard_error,
                           t.truncated_requests ? fmt::format("  ({} truncated)", t.truncated_requests) : "");
        }
    }
    if (!a.no_write) {
        const fs::path file = RunFolder{ref.run_dir}.eval_results(ref.import_folder ? ref.which : ref.optimizer);
        json merged = out;
        std::error_code ec;
        if (fs::exists(file, ec)) {  // keep the earlier results of the same checkpoint
            std::ifstream in(file);
            const json old = json::parse(in, nullptr, false);
            if (!old.is_discarded() && old.is_object() && old.contains("checkpoint") && old["checkpoint"] == ref.dir &&
                old.contains("step") && old["step"] == ref.step) {
                merged = old;
                for (auto it = out.begin(); it != out.end(); ++it) {
                    if (it.key() == "tasks" && merged.contains("tasks") && merged["tasks"].is_object())
                        for (auto t = it->begin(); t != it->end(); ++t) merged["tasks"][t.key()] = *t;
                    else merged[it.key()] = *it;
                }
            }
        }
        write_file_atomic(file.string(), json_text(merged) + "\n");
        if (!a.json_out) fmt::print("wrote {}\n", file.string());
    }
    if (a.json_out) std::cout << json_text(out) << "\n";
}

}  // namespace

void register_eval_command(CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    CLI::App* cmd =
        app.add_subcommand("eval", "Score a checkpoint: perplexity on a prepared split, zero-shot multiple choice");
    cmd->add_option("checkpoint", a->path,
                    "A run folder (with --optimizer), a checkpoint folder, or a folder `skew import` wrote")
        ->required();
    cmd->add_option("--optimizer", a->optimizer,
                    "The optimizer whose checkpoint to score (needed when the run has several)");
    cmd->add_option("--which", a->which, "best or last (default: best when present, else last)")
        ->check(CLI::IsMember({"best", "last"}));
    cmd->add_option("--data", a->data_dir, "Prepared dataset folder: loss and perplexity over its split");
    cmd->add_option("--split", a->split, "Split for --data: val (default) or train")
        ->check(CLI::IsMember({"val", "train"}));
    cmd->add_option("--batches", a->batches, "Batches of train.batch_size x train.seq_len to score (default: all)")
        ->check(int_at_least(0));
    cmd->add_option("--task", a->tasks, "A task's JSONL file (repeatable, each with its --format)")->take_all();
    cmd->add_option("--format", a->formats, "piqa, winogrande, hellaswag or arc (one per --task, same order)")
        ->take_all();
    cmd->add_option("--tokenizer", a->tokenizer_dir, "Tokenizer folder (default: the run's data.tokenizer_dir)");
    cmd->add_option("--backend", a->backend, fmt::format("{} (default auto)", choice_list<BackendChoice>()))
        ->check(CLI::IsMember(choice_names<BackendChoice>()));
    cmd->add_option("--batch-size", a->batch_size, "Sequences per forward when scoring tasks (default 8)")
        ->check(int_at_least(1));
    cmd->add_flag("--json", a->json_out, "Print the results as JSON on stdout");
    cmd->add_flag("--no-write", a->no_write,
                  "Do not write <run>/eval_<optimizer>.json (an import folder: eval_import.json)");
    cmd->add_flag("--no-progress", a->no_progress, "No progress line");
    cmd->callback([a, cmd] {
        // a flag of the part of eval that does not run would be ignored without a word
        for (const char* flag : {"--tokenizer", "--batch-size"})
            if (cmd->count(flag) > 0 && a->tasks.empty())
                throw CLI::ValidationError(flag,
                                           "is for --task scoring; without --task it would be ignored (perplexity "
                                           "reads token shards in train.batch_size batches): drop it, or add --task");
        for (const char* flag : {"--split", "--batches"})
            if (cmd->count(flag) > 0 && a->data_dir.empty())
                throw CLI::ValidationError(flag,
                                           "is for --data perplexity; without --data it would be ignored: drop it, "
                                           "or add --data DIR");
        run_eval(*a);
    });
}

}  // namespace skew::tools
