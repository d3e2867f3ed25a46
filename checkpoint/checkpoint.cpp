// Checkpoint folders: model.safetensors, optimizer.safetensors and trainer_state.json
// (checkpoint/run_folder.h names them) written into a hidden temporary folder and swapped in
// atomically, the trainer state's JSON and its checks (checkpoint/checkpoint.h).
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "checkpoint/run_folder.h"
#include "checkpoint/tensor_scan.h"
#include "engine/config_schema.h"
#include "engine/error.h"
#include "engine/json_strict.h"

namespace fs = std::filesystem;

namespace skew {

namespace {

std::string os_error() { return std::strerror(errno); }

// Weights and optimizer state as loaded must be finite: a NaN or inf would make every later step
// non-finite (and be blamed on a gradient). Names the file, tensor and element.
void refuse_non_finite(const std::string& path, const std::vector<NamedTensor>& tensors) {
    const std::optional<NonFinite> bad = first_non_finite(tensors);
    if (!bad) return;
    fail(
        "{}: tensor '{}' holds a non-finite value ({}) at {}: the checkpoint is corrupt or was saved after a "
        "numerical fault; resume from another checkpoint (e.g. best/) or start a new run",
        path, bad->tensor,
        std::isnan(bad->value) ? "nan"
        : bad->value > 0       ? "inf"
                               : "-inf",
        shape_text(bad->coords));
}

}  // namespace

bool record_validation(TrainerState& s, int64_t step, double val_loss) {
    if (!std::isfinite(val_loss) || !(val_loss < s.best_val_loss)) return false;
    s.best_val_loss = val_loss;
    s.best_val_step = step;
    return true;
}

nlohmann::json trainer_state_to_json(const TrainerState& s) {
    nlohmann::json j = {
        {"step", s.step},
        {"optimizer", s.optimizer},
        {"data_position", s.data_position},
        {"seed", s.seed},
        {"skipped_steps", s.skipped_steps},
        {"best_val_step", s.best_val_step},
        {"tokens_seen", s.tokens_seen},
        {"train_seconds", s.train_seconds},
        {"config_hash", s.config_hash},
        {"extra", s.extra},
    };
    j["best_val_loss"] = std::isfinite(s.best_val_loss) ? nlohmann::json(s.best_val_loss) : nlohmann::json(nullptr);
    if (!s.model_config.empty()) j["model"] = s.model_config;
    return j;
}

TrainerState trainer_state_from_json(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    auto need = [&](const char* key) -> const nlohmann::json& {
        if (!j.contains(key)) fail("{}: missing key '{}'", source, key);
        return j[key];
    };
    auto integer = [&](const char* key) {
        need(key);
        return json_int_or(j, key, 0, source);
    };
    auto number = [&](const char* key) {
        const auto& v = need(key);
        if (!v.is_number()) fail("{}: '{}' must be a number, got {}", source, key, v.dump());
        return v.get<double>();
    };
    auto text = [&](const char* key) {
        const auto& v = need(key);
        if (!v.is_string()) fail("{}: '{}' must be a string, got {}", source, key, v.dump());
        return v.get<std::string>();
    };
    TrainerState s;
    s.step = integer("step");
    s.optimizer = text("optimizer");
    s.data_position = integer("data_position");
    s.seed = integer("seed");
    s.skipped_steps = integer("skipped_steps");
    s.best_val_step = integer("best_val_step");
    s.tokens_seen = integer("tokens_seen");
    s.train_seconds = number("train_seconds");
    s.config_hash = text("config_hash");
    const auto& best = need("best_val_loss");
    if (best.is_null()) s.best_val_loss = std::numeric_limits<double>::infinity();
    else if (best.is_number()) s.best_val_loss = best.get<double>();
    else fail("{}: 'best_val_loss' must be a number or null, got {}", source, best.dump());
    if (j.contains("model")) {
        const auto& m = j["model"];
        if (!m.is_object()) fail("{}: 'model' must be an object of the model settings, got {}", source, m.dump());
        for (const auto& [key, v] : m.items()) {
            if (!v.is_string()) fail("{}: model.{} must be a string, got {}", source, key, v.dump());
            s.model_config[key] = v.get<std::string>();
        }
    }
    if (j.contains("extra")) {
        s.extra = j["extra"];
        if (!s.extra.is_object()) fail("{}: 'extra' must be an object, got {}", source, s.extra.dump());
        if (json_int_or(s.extra, "optimizer_t", 0, source + " 'extra'") < 0)
            fail("{}: extra.optimizer_t must be >= 0, got {}", source, s.extra["optimizer_t"].dump());
    }
    if (s.step < 0 || s.data_position < 0 || s.skipped_steps < 0 || s.tokens_seen < 0)
        fail("{}: step, data_position, skipped_steps and tokens_seen must be >= 0", source);
    // Counters a run only ever increments: 2^53 is beyond any run and leaves them far from overflow.
    constexpr int64_t MAX_COUNT = int64_t(1) << 53;
    for (const auto& [key, v] : {std::pair<const char*, int64_t>{"step", s.step},
                                 {"data_position", s.data_position},
                                 {"skipped_steps", s.skipped_steps},
                                 {"tokens_seen", s.tokens_seen}})
        if (v > MAX_COUNT) fail("{}: '{}' is {}, beyond any run (at most 2^53)", source, key, v);
    return s;
}

void check_trainer_state_counters(const TrainerState& s, int64_t config_seed, const std::string& source) {
    if (s.data_position != s.step)
        fail(
            "{}: data_position {} but step {}: each step takes one batch, so a checkpoint of step {} resumes at batch "
            "{} (was the file edited?)",
            source, s.data_position, s.step, s.step, s.step);
    const int64_t taken = s.step - s.skipped_steps;
    if (s.skipped_steps > s.step + 1)
        fail("{}: skipped_steps {} but step {}: more steps skipped than run", source, s.skipped_steps, s.step);
    if (s.extra.is_object() && s.extra.contains("optimizer_t")) {
        const int64_t t = s.extra["optimizer_t"].get<int64_t>();
        if (t != taken && t != taken + 1)
            fail(
                "{}: extra.optimizer_t {} but step {} with {} skipped: the optimizer took {} updates (was the file "
                "edited?)",
                source, t, s.step, s.skipped_steps, taken);
    }
    if (s.seed != config_seed)
        fail("{}: seed {} but the run's config says train.seed {} (was the file edited?)", source, s.seed, config_seed);
}

std::string config_hash(std::string_view resolved_yaml) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(resolved_yaml.data(), resolved_yaml.size(), digest, &len, EVP_sha256(), nullptr) != 1)
        fail("config hash: OpenSSL SHA-256 failed");
    std::string hex;
    for (unsigned int i = 0; i < 8 && i < len; ++i) hex += fmt::format("{:02x}", digest[i]);
    return hex;
}

bool config_hash_matches(const Config& cfg, const std::string& config_path, const std::string& hash) {
    if (hash == config_hash(cfg.resolved_yaml)) return true;
    std::ifstream in(config_path, std::ios::binary);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return hash == config_hash(text);
}

bool checkpoint_exists(const std::string& dir) { return fs::exists(CheckpointFolder{dir}.trainer_state()); }

std::string begin_checkpoint_folder(const std::string& dir, const std::string& tag) {
    fs::path target = fs::path(dir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    const std::string parent = parent_folder(target.string());
    create_folders(parent, target.string());
    const std::string base = target.filename().string();

    // A save interrupted between the fallback path's two renames left only <dir>.old: put it back.
    std::error_code ec;
    const std::string old_dir = target.string() + ".old";
    if (!fs::exists(target) && fs::exists(CheckpointFolder{old_dir}.trainer_state())) {
        if (::rename(old_dir.c_str(), target.c_str()) != 0)
            fail("{}: cannot restore {}: {}", target.string(), old_dir, os_error());
        fsync_directory(parent);
    }
    // Remove what a crashed save left behind (hidden temporaries, a superseded .old; never read).
    for (const auto& entry : fs::directory_iterator(parent, ec)) {
        std::string n = entry.path().filename().string();
        if (n.starts_with(fmt::format(".{}.tmp-", base)) || n == base + ".old") fs::remove_all(entry.path(), ec);
    }
    const fs::path temp = fs::path(parent) / fmt::format(".{}.tmp-{}", base, tag);
    create_folders(temp.string(), target.string());
    return temp.string();
}

void commit_checkpoint_folder(const std::string& temp_dir, const std::string& dir) {
    fs::path target = fs::path(dir).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();
    const std::string parent = parent_folder(target.string());
    const std::string old_dir = target.string() + ".old";
    const fs::path temp(temp_dir);
    std::error_code ec;
    try {
        fsync_directory(temp.string());
        if (fs::exists(target)) {
            // Swap the complete new folder in with one atomic exchange, then drop the old one.
            if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
                if (errno != EINVAL && errno != ENOSYS)
                    fail("{}: cannot swap in the new checkpoint: {}", target.string(), os_error());
                // File system without RENAME_EXCHANGE: two renames; load_checkpoint falls back to .old.
                const std::string& old = old_dir;
                if (::rename(target.c_str(), old.c_str()) != 0)
                    fail("{}: cannot move the old checkpoint aside: {}", target.string(), os_error());
                if (::rename(temp.c_str(), target.c_str()) != 0)
                    fail("{}: cannot move the new checkpoint in: {}", target.string(), os_error());
                fsync_directory(parent);
                fs::remove_all(old, ec);
            } else {
                fsync_directory(parent);
                fs::remove_all(temp, ec);
            }
        } else {
            if (::rename(temp.c_str(), target.c_str()) != 0)
                fail("{}: cannot move the new checkpoint in: {}", target.string(), os_error());
            fsync_directory(parent);
        }
    } catch (...) {
        fs::remove_all(temp, ec);
        throw;
    }
}

void save_checkpoint(const std::string& dir, const Arena& arena, const TrainerState& state, Backend* backend) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    const fs::path temp = begin_checkpoint_folder(dir, std::to_string(::getpid()));
    const CheckpointFolder out{temp.string()};
    try {
        const std::map<std::string, std::string> meta = {
            {"format", "pt"}, {"step", std::to_string(state.step)}, {"optimizer", state.optimizer}};
        write_safetensors(out.weights(), weight_tensors(arena, backend), meta);
        write_safetensors(out.optimizer_state(), buffer_tensors(arena, BufferKind::STATE, backend), meta);
        write_file_atomic(out.trainer_state(), json_text(trainer_state_to_json(state)) + "\n");
    } catch (...) {
        std::error_code ec;
        fs::remove_all(temp, ec);
        throw;
    }
    commit_checkpoint_folder(temp.string(), dir);
}

namespace {

/// The folder of checkpoint `dir`: itself, or `dir`.old where a save was interrupted between the
/// two renames of the fallback path (only <dir>.old is left then).
fs::path resolve_checkpoint(const std::string& dir) {
    fs::path d(dir);
    if (checkpoint_exists(dir)) return d;
    fs::path old = fs::path(fs::path(dir).lexically_normal().string() + ".old");
    if (fs::exists(CheckpointFolder{old.string()}.trainer_state())) return old;
    fail("{}: no checkpoint here ({} is missing)", dir, CheckpointFolder{dir}.trainer_state());
}

TrainerState parse_trainer_state(const fs::path& d) {
    const std::string state_path = CheckpointFolder{d.string()}.trainer_state();
    return trainer_state_from_json(read_json_file(state_path), state_path);
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) fail("{}: cannot open", path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    std::string json_error;
    if (!json_try_parse_strict(ss.str(), j, json_error)) fail("{}: not valid JSON: {}", path, json_error);
    return j;
}

TrainerState read_trainer_state(const std::string& dir) { return parse_trainer_state(resolve_checkpoint(dir)); }

void check_model_config(const Config& cfg, const std::map<std::string, std::string>& recorded,
                        const std::string& config_path, const std::string& checkpoint_dir,
                        const std::string& what_to_do) {
    if (recorded.empty()) return;
    std::map<std::string, std::string> now;
    for (auto& [key, value] : config_section_values(cfg, "model")) now[key] = value;
    for (const auto& [recorded_key, was] : recorded) {
        // a key recorded under its former name (model.layernorm_eps) is compared as the key it now is
        const std::string key = canonical_section_key("model." + recorded_key).substr(6);
        const auto it = now.find(key);
        if (it == now.end() || it->second != was)
            fail("{}: model.{} is {} but the checkpoint {} was trained with {}: {}", config_path, key,
                 it == now.end() ? "absent" : it->second, checkpoint_dir, was, what_to_do);
    }
}

TrainerState load_checkpoint(const std::string& dir, const Arena& arena, Backend* backend) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    const fs::path d = resolve_checkpoint(dir);
    const CheckpointFolder folder{d.string()};
    const std::string state_path = folder.trainer_state();
    TrainerState s = parse_trainer_state(d);
    if (fs::exists(folder.layout()))
        fail(
            "{}: a sharded checkpoint (written by several ranks, see its layout.json); this run is one process: resume "
            "it with mpirun and the same layout, or `skew export` its weights",
            d.string());
    if (s.optimizer != arena.plan->optimizer)
        fail("{}: checkpoint of optimizer '{}' cannot be loaded into a run of optimizer '{}'", state_path, s.optimizer,
             arena.plan->optimizer);
    for (const bool weights : {true, false}) {
        const std::string path = weights ? folder.weights() : folder.optimizer_state();
        const std::vector<NamedTensor> tensors =
            weights ? weight_tensors(arena, backend) : buffer_tensors(arena, BufferKind::STATE, backend);
        auto meta = read_safetensors_into(path, tensors);
        auto it = meta.find("step");
        if (it == meta.end()) fail("{}: metadata has no 'step'", path);
        if (it->second != std::to_string(s.step))
            fail("{}: written at step {} but {} says step {}: the folder mixes two saves", path, it->second, state_path,
                 s.step);
        refuse_non_finite(path, tensors);
    }
    return s;
}

}  // namespace skew
