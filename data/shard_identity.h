// What a run trained on, recorded in the run folder whatever the data's source (skew prepare's
// shards with a manifest.json, or llm.c's without one): every shard's file name, size and MD5, so
// that `skew train --resume` refuses shards replaced or edited since the run started (docs/data.md).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch_stream.h"

namespace skew::data {

/// Shards up to this many bytes in total are hashed whole; above it each shard's hash covers its
/// first and last MiB and its size ("md5_sampled"), so a start stays cheap on large datasets.
inline constexpr int64_t kShardIdentityFullHashBytes = int64_t(1) << 30;

/// The name of the record in a run folder (the trainer writes shard_identity() there at a run's start).
inline constexpr const char* kShardIdentityFile = "data_identity.json";

/// The identity of the splits' shards: {"shards": [{"split", "file" (name only), "bytes", "md5" or
/// "md5_sampled"}, ...]} in stream order. Throws skew::Error naming a shard that cannot be read.
nlohmann::json shard_identity(const std::vector<const TokenSplit*>& splits);

/// The first difference between two identities as one phrase ("shard 2 (train_000001.bin): bytes
/// 2048 in the run's record, 4096 now"), or "" when they agree.
std::string shard_identity_difference(const nlohmann::json& was, const nlohmann::json& now);

/// --resume: compare run_dir/data_identity.json with the shards now. Throws skew::Error naming the
/// run, the data folder and the first difference; a run folder without the record (started by an
/// older skew) passes.
void shard_identity_check(const std::string& run_dir, const std::string& data_dir,
                          const std::vector<const TokenSplit*>& splits);

}  // namespace skew::data
