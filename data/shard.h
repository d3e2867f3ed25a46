// Token shards in llm.c's .bin layout (docs/data.md, "Shard format (llm.c)"): a 256 x int32 header (magic
// 20240520, version 1, token count), then uint16 tokens. Shards from llm.c's data scripts load
// unchanged; shards are written to a hidden temporary file and renamed into place.
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace skew::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;       // 1 = uint16 tokens
inline constexpr int64_t kShardHeaderInts = 256;  // header bytes = 1024
inline constexpr int64_t kShardMaxTokens = (int64_t(1) << 31) - 1;

/// The hidden temporary a shard is written to before the rename into place: <dir>/.<file>.tmp-<pid>
/// (dot-prefixed so listings and `*.bin` globs skip it; the pid keeps concurrent writers apart).
std::string shard_temp_path(const std::string& path);

/// Whether a file name in a shard folder is a temporary of `skew prepare`: a shard's or the
/// manifest's (shard_temp_path names), or the visible "<name>.tmp" of earlier versions. One exists
/// only while a prepare runs or after one was interrupted, so its folder is no complete dataset.
bool is_prepare_temp_name(const std::string& file_name);

/// Write a whole shard atomically (shard_temp_path, then rename). Throws skew::Error on I/O failure.
void shard_write(const std::string& path, std::span<const uint16_t> tokens);

/// Validate a shard's header and size and return its token count. Throws skew::Error naming the
/// file on a wrong magic, an unknown version, or a size that differs from 1024 + 2 * tokens.
int64_t shard_check(const std::string& path);

/// Read a whole shard (validated as shard_check does).
std::vector<uint16_t> shard_read(const std::string& path);

/// A streaming shard writer: tokens are appended to shard_temp_path(path); shard_writer_close writes
/// the final count into the header and renames. Memory stays bounded however many tokens pass through.
struct ShardWriter {
    std::string path;  // the final name
    std::string temp;  // shard_temp_path(path), written while open
    std::FILE* file = nullptr;
    int64_t tokens = 0;
    ShardWriter() = default;
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;
    ~ShardWriter();  // an unclosed writer removes its temporary file
};

/// Start a shard at path. Throws skew::Error when the file cannot be created.
void shard_writer_open(ShardWriter& w, const std::string& path);

/// Append token ids (each must be < 65536; the writer's caller guarantees a GPT-2-sized vocab).
void shard_writer_append(ShardWriter& w, std::span<const int32_t> tokens);

/// Finish the header, flush and close the temporary without renaming it, for a caller that puts
/// several files in place together (`skew prepare`); returns the token count. The temporary
/// (w.temp) is then the caller's to rename or remove.
int64_t shard_writer_finish(ShardWriter& w);

/// shard_writer_finish, then rename the temporary into place; returns the token count.
int64_t shard_writer_close(ShardWriter& w);

}  // namespace skew::data
