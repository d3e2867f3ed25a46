// Checkpoints and durable files (docs/design.md, "Errors, not crashes": a checkpoint on disk is never
// left half-written). Weights and optimizer state are safetensors files (header JSON + raw
// little-endian data, readable by PyTorch's `safetensors`); the trainer's scalars are a JSON file.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/backend.h"

namespace skew {

// ---- tensors in memory

/// A named tensor in host or device memory: what a safetensors file stores or a fault check scans.
struct NamedTensor {
    std::string name;  // name in the file / in messages
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // row-major
    void* data = nullptr;        // host pointer, or device pointer when device == CUDA
    ArenaDevice device = ArenaDevice::HOST;
    Backend* backend = nullptr;  // copies device memory (Backend::copy_to_host/_device); needed when device != HOST

    int64_t numel() const;
    int64_t bytes() const { return numel() * dtype_bytes(dtype); }
};

/// The weights of an arena as tensors named by the parameter table ("blocks.1.moe.router"), in
/// table order: the plan's "weight.<param>" buffers with the prefix removed. `backend` copies a
/// device arena's memory (nullptr for a host arena).
std::vector<NamedTensor> weight_tensors(const Arena& arena, Backend* backend = nullptr);

/// The plan buffers of one kind (GRAD, STATE, ...), named exactly as the plan names them
/// ("grad.<param>", "state.<param>.<kind>"), in plan order; `backend` as for weight_tensors.
std::vector<NamedTensor> buffer_tensors(const Arena& arena, BufferKind kind, Backend* backend = nullptr);

/// Copy `bytes` bytes starting `offset` bytes into t's data to host memory dst (t.backend's
/// copy_to_host for device memory). Throws skew::Error naming the tensor on a range outside it, a
/// device tensor without a backend, or a failed copy.
void copy_tensor_to_host(void* dst, const NamedTensor& t, int64_t offset, int64_t bytes);

/// The reverse: host memory src into t's data at `offset`.
void copy_tensor_from_host(const NamedTensor& t, int64_t offset, const void* src, int64_t bytes);

// ---- durable files

/// Write `bytes` to `path` so that a reader sees either the old file or the whole new one: write
/// to a hidden temporary in the same folder (".<name>.tmp-<pid>"), fsync it, rename it over path,
/// fsync the folder. Creates missing parent folders. Throws skew::Error naming path and the OS
/// error; the temporary is removed on failure.
void write_file_atomic(const std::string& path, std::string_view bytes);

/// fsync a folder so that renames and creations inside it are durable. Throws skew::Error.
void fsync_directory(const std::string& dir);

/// Testing hook: called before every chunk a durable writer puts into a file, with the final path
/// and the byte offset about to be written. A hook that throws simulates a failed write (disk full);
/// one that calls _exit simulates a crash. Pass nullptr to remove it. Not thread-safe.
using WriteHook = std::function<void(const std::string& path, int64_t offset)>;
void set_write_hook_for_testing(WriteHook hook);

// ---- safetensors

/// Safetensors dtype string of a DType: "BF16", "F32", "I32", "U16".
const char* safetensors_dtype(DType t);

/// One tensor entry of a safetensors header; offsets are bytes relative to the data region.
struct SafetensorsEntry {
    std::string name;
    std::string dtype_name;    // as the header writes it: "BF16", "F16", "F64", ...
    bool dtype_known = false;  // one of skew's dtypes (BF16, F32, I32, U16): `dtype` holds it
    DType dtype = DType::F32;  // meaningful only where dtype_known; readers refuse the others by dtype_name
    std::vector<int64_t> shape;
    int64_t begin = 0;
    int64_t end = 0;
};

/// A validated safetensors header.
struct SafetensorsHeader {
    std::string path;
    int64_t file_bytes = 0;
    int64_t data_start = 0;                       // 8 + header length
    std::vector<SafetensorsEntry> tensors;        // in data order
    std::map<std::string, std::string> metadata;  // "__metadata__"

    /// The entry of that name, or nullptr.
    const SafetensorsEntry* find(const std::string& name) const;
};

/// "[2, 3]": a shape or a multi-index (an element's coordinates) as error messages print it.
std::string shape_text(const std::vector<int64_t>& s);

/// The safetensors header of `tensors` laid out in the given order, contiguous from offset 0: the
/// 8-byte little-endian length, then the JSON (string `metadata` as __metadata__ when not empty)
/// padded with spaces to 8 bytes, so the data starts aligned. Only names, dtypes and shapes are
/// read. Throws skew::Error naming `path` on an empty, reserved or repeated tensor name.
std::string safetensors_header_bytes(const std::string& path, const std::vector<NamedTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata);

/// Write tensors (in the given order, contiguous, header padded with spaces to 8 bytes) and the
/// string metadata to `path` durably (as write_file_atomic). Device tensors are staged through a
/// bounded host buffer. Throws skew::Error naming the file.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Read and validate the header of `path`: 8-byte little-endian length within the file, JSON that
/// parses to an object, each entry with a dtype of the safetensors format (BOOL, U8, I8, F8_E5M2,
/// F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64; those skew holds have dtype_known), a
/// shape and data_offsets of exactly numel * dtype bytes inside the file, the non-empty entries
/// tiling the data region (in order of begin, then end) with no gap, overlap or trailing bytes;
/// empty entries may sit at any offset inside it. Throws skew::Error naming the file and what is
/// wrong (an overlap names both tensors), bytes of the file that are not printable UTF-8 escaped.
SafetensorsHeader read_safetensors_header(const std::string& path);

/// Load `path` into `tensors`: every tensor must be in the file with the same dtype and shape,
/// and the file may hold no other tensor. Returns the metadata. Throws skew::Error naming the file
/// and the tensor (missing, extra, dtype or shape mismatch, unreadable).
std::map<std::string, std::string> read_safetensors_into(const std::string& path,
                                                         const std::vector<NamedTensor>& tensors);

// ---- checkpoints

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

/// RUNDIR/checkpoints/<optimizer>/<which>, which is "last" or "best".
std::string checkpoint_dir(const std::string& run_dir, const std::string& optimizer, const std::string& which);

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
