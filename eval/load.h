// Loading a trained checkpoint for inference (docs/evaluation.md): a run folder (+ optimizer name,
// best or last) or a checkpoint folder, its run's config.yaml, the weights of model.safetensors,
// on the CPU or CUDA backend, bound as a Model of chosen microbatch and sequence length.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "engine/config.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "runtime/session.h"

namespace skew::eval {

/// Where a checkpoint is: its folder, the run folder, the optimizer and the step.
struct CheckpointRef {
    std::string dir;        // the folder holding model.safetensors and trainer_state.json
    std::string run_dir;    // the run folder (config.yaml), two levels above checkpoints/<opt>/
    std::string optimizer;  // from trainer_state.json
    int64_t step = 0;
    std::string which;                                // "best", "last" or the folder's own name
    std::string config_hash;                          // from trainer_state.json: the hash of the config that trained it
    std::map<std::string, std::string> model_config;  // from trainer_state.json (empty in older checkpoints)
    bool import_folder = false;  // a folder `skew import` wrote: dir = run_dir, no optimizer, step 0, which "import"
};

/// Resolve `path`: a checkpoint folder (trainer_state.json inside), a run folder with
/// checkpoints/<optimizer>/<which> (which = "best" when it exists, else "last", unless given), or
/// a folder `skew import` wrote (is_import_folder: its weights as imported, its tokenizer/).
/// `optimizer` may be empty when the run has exactly one. Throws skew::Error naming what is
/// missing (no such folder, no checkpoint, several optimizers and none chosen), or an optimizer or
/// `which` given for an import folder, which has neither.
CheckpointRef resolve_checkpoint(const std::string& path, const std::string& optimizer, const std::string& which = "");

/// "DIR (adamw step 200)", or "DIR (a skew import)": the checkpoint in log lines.
std::string checkpoint_label(const CheckpointRef& ref);

/// The token shards of `data_dir` for `ref`'s model: refused (skew::Error naming `what`, the
/// manifests or the tokenizer file) where they were tokenized by another tokenizer than the run's
/// (data::check_run_data_tokenizer) or, for an import folder, than the one in its tokenizer/.
void check_data_tokenizer(const CheckpointRef& ref, const std::string& data_dir, const std::string& what);

/// The run's config.yaml loaded for `ref` (RUN/config.yaml), refused where its model section is not
/// the one that trained the checkpoint: a setting that changes the computation but not a tensor's
/// shape (model.top_k, layernorm_eps) would otherwise give silently wrong results. Every model key
/// the checkpoint recorded must hold the same value (a key it lacks, added by a later skew, is not
/// compared); a checkpoint from before skew recorded them is compared by config hash, with a warning
/// only (the hash also changes when skew adds a config key). Throws skew::Error naming config.yaml,
/// the key and both values.
Config load_run_config(const CheckpointRef& ref);

/// The tokenizer of `ref`'s run: the folder `flag_dir` (--tokenizer), or without it the run's
/// data.tokenizer_dir (run_cfg; an import folder: its tokenizer/), loaded and checked against the
/// run's manifest (data::check_run_tokenizer). Throws skew::Error naming where the folder came from
/// when it is missing or a file, or holds another tokenizer than the run's.
data::Tokenizer load_run_tokenizer(const CheckpointRef& ref, const Config& run_cfg, const std::string& flag_dir);

/// A model with its weights loaded: its backend and the inference session bound on it (which owns
/// everything the model points into; declared after the backend, so it goes first).
struct LoadedModel {
    Config cfg;  // the run's config with the chosen microbatch and sequence length
    CheckpointRef ref;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Session> session;
    Model* model = nullptr;  // session->model
};

/// Load `ref`'s weights into a model of `microbatch` sequences of `seq_len` tokens (<=
/// model.max_seq_len) on `backend` ("cpu", "cuda", or "auto": CUDA when built with it, a GPU is
/// visible and the CUDA attention kernels take model.head_dim). The plan is the trainer's without optimizer state. Throws skew::Error naming the
/// file (config.yaml, model.safetensors) on anything missing, corrupt or of another shape.
std::unique_ptr<LoadedModel> load_model(const CheckpointRef& ref, const std::string& backend, int64_t microbatch,
                                        int64_t seq_len);

}  // namespace skew::eval
