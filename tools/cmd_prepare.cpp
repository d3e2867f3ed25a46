// skew prepare: text corpus (.txt / .jsonl / .gz files, directories, globs) -> llm.c token shards
// split by document hash, plus manifest.json (docs/design.md "Data"; data/prepare.h does the work).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "data/prepare.h"
#include "data/shard.h"
#include "data/split.h"
#include "engine/error.h"
#include "tools/commands.h"
#include "train/signals.h"

namespace skew::tools {

namespace {

/// --val-ratio: documents go to validation by hash bucket, 1 of 1000 at a time (data/split.h), so a
/// ratio that rounds to no bucket leaves no validation batch for `skew train` (and one that rounds to
/// all 1000 leaves no training split): refused naming the smallest and largest usable ratio.
CLI::Validator val_ratio_check() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(text.c_str(), &end);
            if (text.empty() || *end != '\0' || !(v >= 0.0 && v <= 1.0))
                return "'" + text + "' is not a ratio in [0, 1]";
            const int train_buckets = data::split_train_buckets(v);
            if (train_buckets >= 1000)
                return text +
                       " leaves no validation split (documents go to validation 1/1000 at a time by hash, and "
                       "`skew train` needs validation batches); the smallest is 0.001, the default 0.05";
            if (train_buckets <= 0) return text + " leaves no training split; the largest is 0.999, the default 0.05";
            return "";
        },
        "RATIO in [0.001, 0.999]");
}

}  // namespace

void register_prepare_command(CLI::App& app) {
    auto opts = std::make_shared<data::PrepareOptions>();
    auto bad_lines = std::make_shared<std::string>("skip");
    auto no_progress = std::make_shared<bool>(false);
    CLI::App* cmd =
        app.add_subcommand("prepare", "Tokenize a text corpus into train/val token shards (llm.c .bin) and a manifest");
    cmd->add_option(
           "--input", opts->inputs,
           "Input files, directories or globs: .txt (one document per file), .jsonl (one per line), optionally .gz")
        ->required()
        ->expected(1, -1);
    cmd->add_option("--out", opts->out_dir, "Output directory for train_*.bin, val_*.bin and manifest.json")
        ->required();
    cmd->add_option("--tokenizer", opts->tokenizer_dir,
                    "Directory with tokenizer.json, tokenizer.model, or GPT-2's encoder.json + vocab.bpe (or "
                    "vocab.json + merges.txt)")
        ->capture_default_str();
    cmd->add_option("--val-ratio", opts->val_ratio, "Share of documents (by MD5 bucket) in the validation split")
        ->check(val_ratio_check())
        ->capture_default_str();
    cmd->add_option("--separator", opts->separator,
                    "Between documents: eot (the tokenizer's end-of-text token before each document, as llm.c; GPT-2: "
                    "50256) or none (the paper)")
        ->check(CLI::IsMember({"eot", "none"}))
        ->capture_default_str();
    cmd->add_option("--bad-lines", *bad_lines,
                    "A .jsonl line that is not an object with a string field: skip (warn and count) or fail")
        ->check(CLI::IsMember({"skip", "fail"}))
        ->capture_default_str();
    cmd->add_option("--field", opts->field, "JSONL field holding the document text")->capture_default_str();
    cmd->add_flag(
        "--allow-special", opts->allow_special,
        "Encode the literal text of special tokens inside documents as their ids (GPT-2: <|endoftext|> as 50256)");
    cmd->add_option("--threads", opts->threads, "Tokenizer threads (0 = all cores, at most 1024)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    cmd->add_option("--shard-tokens", opts->shard_tokens, "Tokens per shard file")
        ->check(CLI::Range(int64_t(1), data::kShardMaxTokens))
        ->capture_default_str();
    cmd->add_flag("--no-progress", *no_progress, "Do not draw the progress bar");
    cmd->callback([opts, bad_lines, no_progress] {
        opts->skip_bad_lines = *bad_lines == "skip";
        opts->progress = !*no_progress;
        // Ctrl-C or SIGTERM: the run stops between documents, removes what it wrote (and the --out
        // folder if it created it) and exits 128 + signal; a second signal exits at once (a rerun
        // removes the temporaries that leaves).
        std::error_code ec;
        const bool out_existed = std::filesystem::exists(opts->out_dir, ec);
        install_stop_handlers(
            "\nskew: stop requested: removing this run's temporary files, then exiting (signal again "
            "to exit at once)\n");
        opts->stop_requested = [] { return stop_requested(); };
        data::PrepareSummary s;
        try {
            s = data::prepare_run(*opts);
        } catch (const Error& e) {
            const int sig = stop_signal();
            restore_stop_handlers();
            if (!sig) throw;
            std::fprintf(
                stderr, "skew: error: %s (%s: stopped by signal %d; %s)\n", e.what(), opts->out_dir.c_str(), sig,
                out_existed                                  ? "the folder is as it was"
                : std::filesystem::exists(opts->out_dir, ec) ? "the folder this run created is left, without its files"
                                                             : "the folder this run created was removed");
            std::exit(128 + sig);
        }
        restore_stop_handlers();
        spdlog::info(
            "prepare: {} documents ({} train, {} val), {} train tokens, {} val tokens, {:.1f} MB in {:.1f} s ({:.1f} "
            "MB/s)",
            s.documents_train + s.documents_val, s.documents_train, s.documents_val, s.tokens_train, s.tokens_val,
            double(s.bytes) / 1e6, s.seconds, s.seconds > 0 ? double(s.bytes) / 1e6 / s.seconds : 0.0);
        if (s.bad_lines) spdlog::warn("prepare: {} bad lines skipped", s.bad_lines);
        if (s.empty_skipped) spdlog::info("prepare: {} empty documents skipped", s.empty_skipped);
        spdlog::info("prepare: wrote {} shards and {}", s.shards.size(), s.manifest);
        if (s.tokens_train == 0) spdlog::warn("prepare: the training split is empty (--val-ratio {})", opts->val_ratio);
        if (s.tokens_val == 0)
            spdlog::warn("prepare: the validation split is empty; `skew train` needs validation batches");
    });
}

}  // namespace skew::tools
