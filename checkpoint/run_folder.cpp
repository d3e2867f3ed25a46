// The names of a run folder's, a checkpoint folder's and an import folder's files
// (checkpoint/run_folder.h).
#include "checkpoint/run_folder.h"

#include <fmt/format.h>

#include <filesystem>

#include "data/shard_identity.h"

namespace fs = std::filesystem;

namespace skew {

namespace {

constexpr const char* CHECKPOINTS_FOLDER = "checkpoints";
constexpr const char* DATA_MANIFEST_FILE = "manifest.json";  // the data folder's own name (skew prepare)
constexpr const char* TOKENIZER_FOLDER = "tokenizer";
constexpr const char* PUBLISHED_FOLDER = "hf";
constexpr const char* METRICS_PREFIX = "metrics_";
constexpr const char* EVAL_PREFIX = "eval_";
constexpr const char* JSON_SUFFIX = ".json";

std::string in(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

/// The optimizer of a per-optimizer file name PREFIX<optimizer>SUFFIX, or nullopt.
std::optional<std::string> optimizer_of(const std::string& file_name, std::string_view prefix,
                                        std::string_view suffix) {
    if (file_name.size() <= prefix.size() + suffix.size() || !file_name.starts_with(prefix) ||
        !file_name.ends_with(suffix))
        return std::nullopt;
    return file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
}

}  // namespace

std::string RunFolder::config() const { return in(dir, CONFIG_FILE); }
std::string RunFolder::data_manifest() const { return in(dir, DATA_MANIFEST_FILE); }
std::string RunFolder::data_identity() const { return in(dir, data::kShardIdentityFile); }
std::string RunFolder::step_log(const std::string& optimizer) const { return in(dir, "steps_" + optimizer + ".jsonl"); }
std::string RunFolder::metrics(const std::string& optimizer) const {
    return in(dir, METRICS_PREFIX + optimizer + JSON_SUFFIX);
}
std::string RunFolder::eval_results(const std::string& optimizer) const {
    return in(dir, EVAL_PREFIX + optimizer + JSON_SUFFIX);
}
std::string RunFolder::checkpoints() const { return in(dir, CHECKPOINTS_FOLDER); }
std::string RunFolder::optimizer_checkpoints(const std::string& optimizer) const {
    return (fs::path(dir) / CHECKPOINTS_FOLDER / optimizer).string();
}
std::string RunFolder::checkpoint(const std::string& optimizer, const std::string& which) const {
    return (fs::path(dir) / CHECKPOINTS_FOLDER / optimizer / which).string();
}

std::optional<std::string> RunFolder::metrics_optimizer(const std::string& file_name) {
    return optimizer_of(file_name, METRICS_PREFIX, JSON_SUFFIX);
}
std::optional<std::string> RunFolder::eval_results_optimizer(const std::string& file_name) {
    return optimizer_of(file_name, EVAL_PREFIX, JSON_SUFFIX);
}

std::string CheckpointFolder::optimizer_shard_file(int64_t rank, int64_t world_size) {
    return fmt::format("optimizer.rank-{}-of-{}.safetensors", rank, world_size);
}

std::string CheckpointFolder::expert_state_shard_file(int64_t expert_rank, int64_t expert_parallel) {
    return fmt::format("optimizer.experts-{}-of-{}.safetensors", expert_rank, expert_parallel);
}

std::string CheckpointFolder::expert_shard_file(int64_t expert_rank, int64_t expert_parallel) {
    return fmt::format("model.experts-{}-of-{}.safetensors", expert_rank, expert_parallel);
}

std::string CheckpointFolder::file(const std::string& name) const { return in(dir, name); }

RunFolder CheckpointFolder::run() const {
    return RunFolder{(fs::path(dir).lexically_normal() / ".." / ".." / "..").lexically_normal().string()};
}

std::string ImportFolder::config() const { return in(dir, CONFIG_FILE); }
std::string ImportFolder::weights() const { return in(dir, CheckpointFolder::WEIGHTS_FILE); }
std::string ImportFolder::tokenizer() const { return in(dir, TOKENIZER_FOLDER); }
HfFolder ImportFolder::published() const { return HfFolder{in(dir, PUBLISHED_FOLDER)}; }

std::string HfFolder::file(const std::string& name) const { return in(dir, name); }

bool is_import_folder(const std::string& dir) {
    std::error_code ec;
    const ImportFolder f{dir};
    return fs::is_directory(dir, ec) && fs::exists(f.config(), ec) && fs::exists(f.weights(), ec) &&
           !fs::exists(CheckpointFolder{dir}.trainer_state(), ec) && !fs::exists(RunFolder{dir}.checkpoints(), ec);
}

}  // namespace skew
