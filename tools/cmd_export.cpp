// skew export: the weights of a run's checkpoint as one safetensors file in the single-process
// format (docs/distributed.md, "Checkpoints and export"): a sharded checkpoint's expert shards are
// merged; the file loads with the single-process reader.
#include <fmt/format.h>

#include <filesystem>

#include "engine/config.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "eval/load.h"
#include "tools/commands.h"
#include "train/sharded_checkpoint.h"

namespace skew::tools {
namespace {

struct ExportArgs {
    std::string run;
    std::string out;
    std::string optimizer;
    bool best = false;
};

void run_export(const ExportArgs& a) {
    const eval::CheckpointRef ref = eval::resolve_checkpoint(a.run, a.optimizer, a.best ? "best" : "last");
    const Config cfg = eval::load_run_config(ref);
    const ParamTable table = build_param_table(cfg.model);
    export_checkpoint_weights(ref.dir, table, a.out);
    fmt::print("skew export: {} ({} checkpoint of {}, step {}{}) -> {}\n", ref.dir, ref.which, ref.optimizer, ref.step,
               checkpoint_is_sharded(ref.dir) ? ", shards merged" : "", a.out);
}

}  // namespace

void register_export_command(CLI::App& app) {
    auto args = std::make_shared<ExportArgs>();
    CLI::App* cmd = app.add_subcommand(
        "export", "Write a checkpoint's weights as one safetensors file (sharded checkpoints merged)");
    cmd->add_option("run", args->run, "A run folder (with --optimizer when it has several) or a checkpoint folder")
        ->required();
    cmd->add_option("--out", args->out, "Output file, e.g. model.safetensors")->required();
    cmd->add_option("--optimizer", args->optimizer, "The optimizer whose checkpoint to export");
    cmd->add_flag("--best", args->best, "The best checkpoint (lowest validation loss) instead of the last");
    cmd->callback([args] { run_export(*args); });
}

}  // namespace skew::tools
