// skew export: the weights of a run's checkpoint as one safetensors file in the single-process
// format (docs/distributed.md, "Checkpoints and export"): a sharded checkpoint's expert shards are
// merged; the file loads with the single-process reader. `--format hf` writes a Hugging Face
// checkpoint folder of the model's family instead (docs/huggingface.md, "Export").
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "checkpoint/run_folder.h"
#include "checkpoint/sharded_checkpoint.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "eval/load.h"
#include "hf/export.h"
#include "hf/folder.h"
#include "tools/commands.h"

namespace skew::tools {
namespace {

struct ExportArgs {
    std::string run;
    std::string out;
    std::string optimizer;
    std::string format = "safetensors";
    bool best = false;
};

// The line `skew export --format hf` prints: what was read, what was written.
void print_hf_export(const std::string& what, const std::string& out, const hf::ExportResult& r) {
    std::vector<std::string> files = {HfFolder::CONFIG_FILE, HfFolder::WEIGHTS_FILE};
    if (r.generation_config) files.push_back(HfFolder::GENERATION_CONFIG_FILE);
    files.insert(files.end(), r.tokenizer_files.begin(), r.tokenizer_files.end());
    fmt::print(
        "skew export: {} -> {} ({}, {} tensors; {}{})\n", what, out, hf::family_architecture(r.family), r.hf_tensors,
        fmt::join(files, ", "),
        r.token_fields.empty() ? "" : fmt::format("; config.json's {} as published", fmt::join(r.token_fields, ", ")));
}

// The published files a run's export writes back: those of the import it started from
// (train.init_from's hf/), where that folder is still there.
std::string published_dir_of_run(const Config& cfg) {
    if (cfg.train.init_from.empty()) return "";
    const std::filesystem::path dir = ImportFolder{cfg.train.init_from}.published().dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
        spdlog::warn(
            "export: {} (train.init_from's published config.json and generation_config.json) is not there: "
            "config.json gets no bos_token_id, eos_token_id or pad_token_id",
            dir.string());
        return "";
    }
    return dir.string();
}

// `skew export IMPORT_DIR --format hf`: an import's weights back in the Hugging Face layout (the
// round trip of docs/huggingface.md; the GPU check's peer step loads it in transformers).
void export_import_folder(const ExportArgs& a) {
    const ImportFolder folder{a.run};
    const std::string config_path = folder.config();
    const Config cfg = load_config(config_path);
    hf::family_of_model(cfg.model, config_path);
    hf::refuse_existing_output(a.out, "--out");
    const ParamTable table = build_param_table(cfg.model);
    const std::string tokenizer_dir = folder.tokenizer();
    const hf::ExportResult r = hf::export_hf(
        cfg.model, read_checkpoint_weights(a.run, table), a.out, config_path,
        std::filesystem::is_directory(tokenizer_dir) ? tokenizer_dir : std::string(), folder.published().dir);
    print_hf_export(a.run + " (a skew import)", a.out, r);
}

void run_export(const ExportArgs& a) {
    // a folder `skew import` wrote: `--format hf` writes its weights back as they are
    if (a.format == "hf" && is_import_folder(a.run)) return export_import_folder(a);
    const eval::CheckpointRef ref =
        eval::resolve_checkpoint(a.run, a.optimizer, a.best ? RunFolder::BEST : RunFolder::LAST);
    const Config cfg = eval::load_run_config(ref);
    const ParamTable table = build_param_table(cfg.model);
    const std::string what = fmt::format("{} ({} checkpoint of {}, step {}{})", ref.dir, ref.which, ref.optimizer,
                                         ref.step, checkpoint_is_sharded(ref.dir) ? ", shards merged" : "");
    if (a.format == "hf") {
        const std::string config_path = RunFolder{ref.run_dir}.config();
        hf::family_of_model(cfg.model, config_path);  // refused before the weights are read
        hf::refuse_existing_output(a.out, "--out");
        const hf::ExportResult r = hf::export_hf(cfg.model, read_checkpoint_weights(ref.dir, table), a.out, config_path,
                                                 cfg.data.tokenizer_dir, published_dir_of_run(cfg));
        print_hf_export(what, a.out, r);
        return;
    }
    export_checkpoint_weights(ref.dir, table, a.out);
    fmt::print("skew export: {} -> {}\n", what, a.out);
}

}  // namespace

void register_export_command(CLI::App& app) {
    auto args = std::make_shared<ExportArgs>();
    CLI::App* cmd = app.add_subcommand(
        "export",
        "Write a checkpoint's weights as one safetensors file (sharded checkpoints merged), or as a Hugging Face "
        "checkpoint folder (--format hf)");
    cmd->add_option("run", args->run,
                    "A run folder (with --optimizer when it has several) or a checkpoint folder; with --format hf also "
                    "a folder `skew import` wrote")
        ->required();
    cmd->add_option(
           "--out", args->out,
           "Output file, e.g. model.safetensors; with --format hf a new folder (config.json, model.safetensors)")
        ->required();
    cmd->add_option("--optimizer", args->optimizer, "The optimizer whose checkpoint to export");
    cmd->add_option("--format", args->format,
                    "safetensors (skew's names, the default) or hf (MixtralForCausalLM, OlmoeForCausalLM or "
                    "Qwen3MoeForCausalLM, as the model section is)")
        ->check(CLI::IsMember({"safetensors", "hf"}));
    cmd->add_flag("--best", args->best, "The best checkpoint (lowest validation loss) instead of the last");
    cmd->callback([args] { run_export(*args); });
}

}  // namespace skew::tools
