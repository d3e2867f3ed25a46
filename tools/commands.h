// The `skew` subcommands. Each cmd_<name>.cpp defines one register function that adds its
// subcommand (with every flag and its help) to the CLI11 app and sets its callback.
// Callbacks throw skew::Error (or any std::exception) on failure; main prints it once and exits 1.
#pragma once
#include <CLI/CLI.hpp>

namespace skew::tools {

void register_plan_command(CLI::App& app);      // cmd_plan.cpp: memory-budget dry run
void register_config_command(CLI::App& app);    // cmd_config.cpp: print the resolved config / reference
void register_prepare_command(CLI::App& app);   // cmd_prepare.cpp: text -> token shards
void register_tokenize_command(CLI::App& app);  // cmd_tokenize.cpp: encode/decode stdin
void register_train_command(CLI::App& app);     // cmd_train.cpp: config-driven training
void register_report_command(CLI::App& app);    // cmd_report.cpp: Table 1 and per-eval perplexity of a run
void register_eval_command(CLI::App& app);    // cmd_eval.cpp: perplexity and zero-shot multiple choice of a checkpoint
void register_sample_command(CLI::App& app);  // cmd_sample.cpp: text generation with a KV cache
void register_export_command(
    CLI::App& app);  // cmd_export.cpp: a checkpoint's weights as one file, or as a Hugging Face folder
void register_import_command(
    CLI::App& app);  // cmd_import.cpp: a Hugging Face checkpoint into a folder skew trains from

}  // namespace skew::tools
