// Resume-time checks of the data a run continues on (docs/data.md): the manifest the run started
// with against the data folder's, and the shards re-hashed against the run's MD5s when that is cheap.
#include "data/resume_check.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "data/batch_stream.h"
#include "data/prepare.h"
#include "data/shard_identity.h"
#include "engine/error.h"

namespace skew::data {
namespace {

namespace fs = std::filesystem;

/// Read a whole file ("" when it cannot be opened).
std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

void check_resume_data(const std::string& data_dir, const std::string& run_dir) {
    const fs::path dir = data_dir;
    std::error_code ec;
    if (dir.is_relative() && !fs::exists(dir, ec))
        fail(
            "--resume {}: data.dir {} is relative to the current directory ({}) and does not exist there; resume the "
            "run from the directory it was started in",
            run_dir, data_dir, fs::current_path(ec).string());
    const fs::path run_copy = fs::path(run_dir) / "manifest.json";
    if (!fs::exists(run_copy, ec)) {
        // Started on shards without a manifest (llm.c's): the shards' identity record alone says
        // which data it was. Without either file nothing tells other data from the run's.
        const fs::path identity = fs::path(run_dir) / kShardIdentityFile;
        if (!fs::exists(identity, ec))
            fail(
                "--resume {}: the run folder has neither manifest.json nor {} (a run writes {} when it starts, and "
                "manifest.json when its data has one): nothing records the data the run started on, so skew cannot "
                "tell whether {} still holds it (its shards, their sizes and MD5s); restore the file(s) from a copy "
                "of the run folder, or start a new run with --out",
                run_dir, kShardIdentityFile, kShardIdentityFile, data_dir);
        return;
    }
    const fs::path data_manifest = dir / "manifest.json";
    if (!fs::exists(data_manifest, ec))
        fail(
            "--resume {}: the run was started on the data of {}, but {} has none: this is not the data the run was "
            "started with (restore it, or start a new run with --out)",
            run_dir, run_copy.string(), data_manifest.string());
    const std::string run_manifest = read_text(run_copy);
    std::string diff;
    try {
        diff = manifest_first_difference(run_manifest, read_text(data_manifest));
    } catch (const Error& e) {
        fail("--resume {}: cannot compare {} with {}: {}", run_dir, data_manifest.string(), run_copy.string(),
             e.what());
    }
    if (!diff.empty())
        fail(
            "--resume {}: the data changed since the run started: {} differs from the run's copy {}: {}; resuming "
            "would train on other batches (restore the data, or start a new run with --out)",
            run_dir, data_manifest.string(), run_copy.string(), diff);
    // The manifests agree; the shards themselves could still have been edited in place. Re-hash
    // them against the MD5s the run started with when that is cheap (<= 1 GiB of shards).
    constexpr int64_t REHASH_MAX_BYTES = int64_t(1) << 30;
    const auto manifest = nlohmann::json::parse(run_manifest, nullptr, false);
    if (manifest.is_discarded() || !manifest.contains("shards") || !manifest["shards"].is_array()) return;
    int64_t total = 0;
    for (const auto& s : manifest["shards"])
        if (s.is_object() && s.contains("file") && s["file"].is_string())
            total += int64_t(fs::file_size(dir / s["file"].get<std::string>(), ec));
    if (total > REHASH_MAX_BYTES) {
        spdlog::info("--resume: {:.1f} GiB of shards in {}: not re-hashed (only up to 1 GiB is)",
                     double(total) / double(int64_t(1) << 30), data_dir);
        return;
    }
    for (const auto& s : manifest["shards"]) {
        if (!s.is_object() || !s.contains("file") || !s.contains("md5") || !s["file"].is_string() ||
            !s["md5"].is_string())
            continue;
        const fs::path shard = dir / s["file"].get<std::string>();
        const std::string now = md5_file(shard.string()), then = s["md5"].get<std::string>();
        if (now != then)
            fail(
                "--resume {}: shard {} changed since the run started (MD5 {} now, {} in the run's {}); resuming would "
                "train on other batches (restore the data, or start a new run with --out)",
                run_dir, shard.string(), now, then, run_copy.string());
    }
}

}  // namespace skew::data
