// Token shards in llm.c's .bin layouts (docs/data.md, "Shard format (llm.c)"): a 256 x int32 header (magic,
// version, token count), then the tokens: GPT-2's layout (magic 20240520, version 1, uint16 tokens) for
// vocabularies of up to 65,536 ids, llm.c's Llama 3 layout (magic 20240801, version 7, uint32) for larger
// ones. Shards from llm.c's data scripts load unchanged; shards are written to a hidden temporary file
// and renamed into place.
#pragma once
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace skew::data {

inline constexpr int32_t kShardMagic = 20240520;     // llm.c's GPT-2 layout
inline constexpr int32_t kShardVersion = 1;          // 1 = uint16 tokens
inline constexpr int32_t kShardMagicU32 = 20240801;  // llm.c's Llama 3 layout
inline constexpr int32_t kShardVersionU32 = 7;       // 7 = uint32 tokens
inline constexpr int64_t kShardHeaderInts = 256;     // header bytes = 1024
inline constexpr int64_t kShardMaxTokens = (int64_t(1) << 31) - 1;

/// Bytes per token a vocabulary of vocab_size ids needs: 2 (uint16) up to 65,536 ids, else 4 (uint32).
inline int shard_token_bytes_for(int64_t vocab_size) { return vocab_size > 65536 ? 4 : 2; }

/// What a shard's header says.
struct ShardHeader {
    int64_t tokens = 0;
    int token_bytes = 2;  // 2: uint16 (magic 20240520, version 1); 4: uint32 (magic 20240801, version 7)
};

/// Validate a shard's header and size. Throws skew::Error naming the file on a magic and version
/// that are neither layout's, a negative count, or a size other than 1024 + token_bytes * tokens.
ShardHeader shard_header(const std::string& path);

/// The hidden temporary a shard is written to before the rename into place: <dir>/.<file>.tmp-<pid>
/// (dot-prefixed so listings and `*.bin` globs skip it; the pid keeps concurrent writers apart).
std::string shard_temp_path(const std::string& path);

/// Whether a file name in a shard folder is a temporary of `skew prepare`: a shard's or the
/// manifest's (shard_temp_path names), or the visible "<name>.tmp" of earlier versions. One exists
/// only while a prepare runs or after one was interrupted, so its folder is no complete dataset.
bool is_prepare_temp_name(const std::string& file_name);

/// Write a whole shard atomically (shard_temp_path, then rename). Throws skew::Error on I/O failure.
void shard_write(const std::string& path, std::span<const uint16_t> tokens);

/// Validate a shard (shard_header) and return its token count.
int64_t shard_check(const std::string& path);

/// Read a whole uint16 shard (validated as shard_check does); a uint32 shard is refused, naming it.
std::vector<uint16_t> shard_read(const std::string& path);

/// Read a whole shard of either layout as int32 ids.
std::vector<int32_t> shard_read_ids(const std::string& path);

/// A streaming shard writer: tokens are appended to shard_temp_path(path); shard_writer_close writes
/// the final count into the header and renames. Memory stays bounded however many tokens pass through.
struct ShardWriter {
    std::string path;  // the final name
    std::string temp;  // shard_temp_path(path), written while open
    std::FILE* file = nullptr;
    int64_t tokens = 0;
    int token_bytes = 2;  // 2: uint16 tokens, 4: uint32 (shard_token_bytes_for)
    ShardWriter() = default;
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;
    ~ShardWriter();  // an unclosed writer removes its temporary file
};

/// Start a shard at path with token_bytes 2 (uint16) or 4 (uint32). Throws skew::Error when the file
/// cannot be created.
void shard_writer_open(ShardWriter& w, const std::string& path, int token_bytes = 2);

/// Append token ids (each must fit the shard's token width; skew::Error naming the id otherwise).
void shard_writer_append(ShardWriter& w, std::span<const int32_t> tokens);

/// Finish the header, flush and close the temporary without renaming it, for a caller that puts
/// several files in place together (`skew prepare`); returns the token count. The temporary
/// (w.temp) is then the caller's to rename or remove.
int64_t shard_writer_finish(ShardWriter& w);

/// shard_writer_finish, then rename the temporary into place; returns the token count.
int64_t shard_writer_close(ShardWriter& w);

}  // namespace skew::data
