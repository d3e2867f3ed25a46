// Checkpoints (docs/design.md, "Errors, not crashes": a checkpoint on disk is never left
// half-written): the weights and optimizer state as safetensors files (checkpoint/safetensors.h),
// the trainer's scalars as a JSON file, in a checkpoint folder (checkpoint/run_folder.h) swapped in
// whole.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>

#include "checkpoint/durable_file.h"
#include "checkpoint/named_tensor.h"
#include "checkpoint/safetensors.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/backend.h"

namespace skew {

/// The trainer's scalars, saved next to the tensors (trainer_state.json). RNG needs no state of its
/// own: every draw is Philox keyed by (seed, stream, step, tensor, element), so seed and step
/// reproduce it.
struct TrainerState {
    int64_t step = 0;           // optimizer steps completed (the next step is step + 1)
    std::string optimizer;      // OptimizerConfig::name
    int64_t data_position = 0;  // index of the next training batch (BatchStream::position)
    int64_t seed = 0;           // train.seed
    int64_t skipped_steps = 0;  // steps skipped for a NaN/inf so far
    double best_val_loss = std::numeric_limits<double>::infinity();  // lowest validation loss so far
    int64_t best_val_step = 0;  // the step it was reached at (0: no evaluation yet)
    int64_t tokens_seen = 0;    // training tokens consumed so far
    double train_seconds = 0;   // time spent in training steps so far (for the summary's mean tokens/s)
    std::string config_hash;    // config_hash(resolved config) of the run that wrote it
    // The model section of that config, key -> value text (config_section_values): what eval, sample
    // and export check the run's config.yaml against. Empty in checkpoints from before it was written.
    std::map<std::string, std::string> model_config;
    nlohmann::json extra = nlohmann::json::object();  // optimizer scalars that live outside the arena
};

/// The JSON in file `path`, parsed strictly (engine/json_strict.h: a key named twice is refused).
/// Throws skew::Error naming the file when it cannot be opened or is not valid JSON.
nlohmann::json read_json_file(const std::string& path);

/// The trainer_state.json of checkpoint folder `dir` (or of `dir`.old, where a save was interrupted
/// between its two renames). Throws skew::Error naming the file: missing, not valid JSON, a field
/// missing or of the wrong type.
TrainerState read_trainer_state(const std::string& dir);

/// Refuse `cfg` when its model section differs from `recorded` (a checkpoint's model_config, the
/// model keys of the config it was trained under): "CONFIG_PATH: model.KEY is NOW but the checkpoint
/// DIR was trained with WAS: ...", then `what_to_do`. No check when `recorded` is empty (checkpoints
/// written before the record). Run by `skew train --resume` before any tensor is read, and by eval,
/// sample and export.
void check_model_config(const Config& cfg, const std::map<std::string, std::string>& recorded,
                        const std::string& config_path, const std::string& checkpoint_dir,
                        const std::string& what_to_do);

/// Refuse a checkpoint whose counters cannot come from a run (a hand-edited trainer_state.json):
/// every step takes one batch, so data_position == step; extra.optimizer_t, the updates taken, is
/// step - skipped_steps (one more when the run stopped on a skipped step); seed == train.seed of
/// the run's config. Throws skew::Error naming `source`, the field and both values.
void check_trainer_state_counters(const TrainerState& s, int64_t config_seed, const std::string& source);

/// Record an evaluation's validation loss: when it is finite and lower than s.best_val_loss, set
/// best_val_loss and best_val_step and return true (the loop then saves the `best` checkpoint).
bool record_validation(TrainerState& s, int64_t step, double val_loss);

/// trainer_state.json's content; non-finite best_val_loss is written as null.
nlohmann::json trainer_state_to_json(const TrainerState& s);

/// Parse trainer_state.json content; `source` names the file in errors (missing key, wrong type).
TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& source);

/// The first 64 bits of the SHA-256 (OpenSSL EVP) of the resolved config text, as 16 hex digits.
std::string config_hash(std::string_view resolved_yaml);

/// Whether `hash` (a checkpoint's config_hash) names the config read from `config_path`: the hash
/// of its resolved YAML, or of the file's text as the run wrote it (resolved YAML and a newline).
/// The second holds for a run folder written before the schema gained or renamed a key
/// (model.layernorm_eps -> model.norm_eps): its config.yaml, unedited, still hashes to what its
/// checkpoints carry, while the same settings resolve to new text. An unreadable file: false.
bool config_hash_matches(const Config& cfg, const std::string& config_path, const std::string& hash);

/// Save a checkpoint to folder `dir`: model.safetensors (weights, parameter-table names),
/// optimizer.safetensors (the plan's state buffers, plan names), trainer_state.json; both tensor
/// files carry the step in their metadata. The files are written into a hidden temporary sibling
/// folder, fsynced, and swapped in with one rename (renameat2 RENAME_EXCHANGE), so `dir` always
/// holds one complete checkpoint, old or new. Throws skew::Error naming the file; `dir` is then
/// left as it was. `backend` copies a device arena's tensors (nullptr for a host arena).
void save_checkpoint(const std::string& dir, const Arena& arena, const TrainerState& state, Backend* backend = nullptr);

/// The first half of a durable checkpoint save: put back a <dir>.old left by an interrupted save,
/// remove hidden temporaries of earlier saves (".<name>.tmp-*", a superseded .old) and create the
/// empty hidden sibling folder ".<name>.tmp-<tag>", whose path is returned; the caller writes the
/// checkpoint's files into it. Creates missing parent folders. Throws skew::Error naming the path.
std::string begin_checkpoint_folder(const std::string& dir, const std::string& tag);

/// The second half: fsync `temp_dir` and swap it in as `dir` with one rename (RENAME_EXCHANGE
/// when `dir` exists), so `dir` holds one complete checkpoint, old or new. On failure the
/// temporary is removed and skew::Error names the path; `dir` is left as it was.
void commit_checkpoint_folder(const std::string& temp_dir, const std::string& dir);

/// Whether `dir` holds a checkpoint (its trainer_state.json exists).
bool checkpoint_exists(const std::string& dir);

/// Load the checkpoint in `dir` into the arena's weights and state and return the trainer state.
/// Refuses, with a skew::Error naming the file and the problem, a missing or corrupt file, a
/// tensor missing or extra or with another shape or dtype than the plan, a state file of another
/// optimizer, files of different steps, or a NaN or inf in any weight or optimizer-state tensor
/// (naming the tensor and element). `backend` as for save_checkpoint.
TrainerState load_checkpoint(const std::string& dir, const Arena& arena, Backend* backend = nullptr);

}  // namespace skew
