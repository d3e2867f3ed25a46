// The folders skew writes and reads back (docs/training.md, "The run folder"): a run folder, the
// checkpoint folders inside it, and the folder `skew import` writes. The one place that names
// their files: every other place asks these types for a path. Paths only; nothing here touches
// the disk but is_import_folder.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace skew {

/// The resolved config a run or an import was written with ("config.yaml").
inline constexpr const char* CONFIG_FILE = "config.yaml";

/// A run folder (`skew train --out`): its config, the data records, per optimizer the step log,
/// metrics, evaluation results and checkpoints. Paths join `dir` and a name as std::filesystem
/// does ("runs/a" and "runs/a/" give "runs/a/config.yaml").
struct RunFolder {
    std::string dir;

    /// The lock `skew train` holds while it writes the folder (dir_lock's file name).
    static constexpr const char* LOCK_FILE = ".skew-train.lock";
    /// The names of an optimizer's two checkpoints: the most recent and the lowest validation loss.
    static constexpr const char* LAST = "last";
    static constexpr const char* BEST = "best";

    std::string config() const;                                             // config.yaml: the resolved config
    std::string data_manifest() const;                                      // manifest.json: a copy of the data's
    std::string data_identity() const;                                      // data_identity.json: the shards' identity
    std::string step_log(const std::string& optimizer) const;               // steps_<optimizer>.jsonl
    std::string metrics(const std::string& optimizer) const;                // metrics_<optimizer>.json
    std::string eval_results(const std::string& optimizer) const;           // eval_<optimizer>.json (skew eval)
    std::string checkpoints() const;                                        // checkpoints/
    std::string optimizer_checkpoints(const std::string& optimizer) const;  // checkpoints/<optimizer>/
    /// checkpoints/<optimizer>/<which>, `which` LAST, BEST or a folder's own name.
    std::string checkpoint(const std::string& optimizer, const std::string& which) const;

    /// The optimizer whose metrics file `file_name` (a name, no folder) is: "metrics_adamw.json" ->
    /// "adamw"; nullopt for any other name, "metrics_.json" included.
    static std::optional<std::string> metrics_optimizer(const std::string& file_name);
    /// The same for an evaluation results file: "eval_adamw.json" -> "adamw".
    static std::optional<std::string> eval_results_optimizer(const std::string& file_name);
};

/// A checkpoint folder (RUN/checkpoints/<optimizer>/<which>, docs/training.md "Checkpoints"): the
/// weights, the optimizer state and the trainer's scalars; a sharded one (docs/distributed.md)
/// adds its layout manifest and one file per shard.
struct CheckpointFolder {
    std::string dir;

    static constexpr const char* WEIGHTS_FILE = "model.safetensors";
    static constexpr const char* OPTIMIZER_FILE = "optimizer.safetensors";
    static constexpr const char* TRAINER_STATE_FILE = "trainer_state.json";
    /// The manifest of a sharded checkpoint; its presence marks the checkpoint as sharded and complete.
    static constexpr const char* LAYOUT_FILE = "layout.json";

    /// "optimizer.rank-<rank>-of-<world_size>.safetensors": one rank's owned optimizer state under
    /// ZeRO-1. Under ZeRO stage 0 the replicated state is rank 0's OPTIMIZER_FILE (with expert
    /// parallelism: its non-expert state only; each expert shard's bank state is in
    /// expert_state_shard_file).
    static std::string optimizer_shard_file(int64_t rank, int64_t world_size);
    /// "optimizer.experts-<expert_rank>-of-<expert_parallel>.safetensors": the optimizer state of
    /// one expert shard's banks (ZeRO stage 0 with expert parallelism), written by its first replica.
    static std::string expert_state_shard_file(int64_t expert_rank, int64_t expert_parallel);
    /// "model.experts-<expert_rank>-of-<expert_parallel>.safetensors": one expert shard's bank weights.
    static std::string expert_shard_file(int64_t expert_rank, int64_t expert_parallel);

    std::string file(const std::string& name) const;  // DIR/name
    std::string weights() const { return file(WEIGHTS_FILE); }
    std::string optimizer_state() const { return file(OPTIMIZER_FILE); }
    std::string trainer_state() const { return file(TRAINER_STATE_FILE); }
    std::string layout() const { return file(LAYOUT_FILE); }
    /// The run folder holding it: DIR/../../.. (RUN of RUN/checkpoints/<optimizer>/<which>),
    /// lexically normalized ("runs/a/checkpoints/adamw/best" gives "runs/a/").
    RunFolder run() const;
};

/// A Hugging Face checkpoint folder (docs/huggingface.md): the one `skew import` reads, the one
/// `skew export --format hf` writes, and the published files an import keeps (IMPORT/hf/).
struct HfFolder {
    std::string dir;

    static constexpr const char* CONFIG_FILE = "config.json";
    static constexpr const char* GENERATION_CONFIG_FILE = "generation_config.json";
    /// The weights in one file (the name skew's own checkpoints use too), or ...
    static constexpr const char* WEIGHTS_FILE = CheckpointFolder::WEIGHTS_FILE;
    /// ... in shards, each tensor's file named by this index's `weight_map`.
    static constexpr const char* WEIGHTS_INDEX_FILE = "model.safetensors.index.json";

    std::string file(const std::string& name) const;  // DIR/name
    std::string config() const { return file(CONFIG_FILE); }
    std::string generation_config() const { return file(GENERATION_CONFIG_FILE); }
    std::string weights() const { return file(WEIGHTS_FILE); }
    std::string weights_index() const { return file(WEIGHTS_INDEX_FILE); }
};

/// The folder `skew import` writes (docs/huggingface.md, "Import"): the model section as a config,
/// the weights under skew's names, the tokenizer's files when the checkpoint had any, and the
/// published config.json and generation_config.json for `skew export --format hf`.
struct ImportFolder {
    std::string dir;

    std::string config() const;     // config.yaml
    std::string weights() const;    // model.safetensors (CheckpointFolder::WEIGHTS_FILE's format)
    std::string tokenizer() const;  // tokenizer/
    HfFolder published() const;     // hf/: the files as published
};

/// Whether `dir` is a folder `skew import` wrote (docs/huggingface.md, "Import"): a folder with
/// config.yaml and model.safetensors but neither a checkpoint's trainer_state.json nor a run's
/// checkpoints/. False where the disk cannot be read.
bool is_import_folder(const std::string& dir);

}  // namespace skew
