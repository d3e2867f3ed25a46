// The batch stream (design.md "Data"): a split's shards are one token stream; batch i takes tokens
// [i*B*T, i*B*T + B*T + 1), x = all but the last, y = all but the first. Deterministic in i, so every
// optimizer of a run sees the same batches, validation batches are fixed and a resume is a seek.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace skew::data {

struct MappedShard;  // an mmap'ed .bin shard (batch_stream.cpp)

/// The token shards of one split, memory-mapped and addressed as one stream.
struct TokenSplit {
    std::string name;                                   // "train", "val", or the pattern given
    std::vector<std::string> paths;                     // shard files, in stream order
    std::vector<std::shared_ptr<MappedShard>> shards;
    std::vector<int64_t> starts;                        // (shards + 1) stream offset of each shard's first token
    int64_t tokens = 0;
};

/// Open the shards of split `split` in dir: files matching dir/*<split>_*.bin (skew's train_000000.bin
/// and llm.c's fineweb_train_000001.bin alike), sorted by name. Each is validated (shard_check).
/// Throws skew::Error when none matches, one is malformed, or dir holds a temporary file of
/// `skew prepare` (is_prepare_temp_name: a prepare was interrupted or is running there).
TokenSplit token_split_open(const std::string& dir, const std::string& split);

/// Open an explicit list of shard files as one stream.
TokenSplit token_split_open_files(const std::vector<std::string>& paths, const std::string& name);

/// Check dir/manifest.json (written by `skew prepare`) against the run's data.separator, when
/// model_vocab_size > 0 against the model's vocabulary, and when val_ratio >= 0 against the
/// config's data.val_ratio (compared as the split's train buckets, split_train_buckets): throws
/// skew::Error naming both values when the shards were prepared with another separator, by a
/// tokenizer with more tokens than model.vocab_size, or with another --val-ratio. A directory
/// without a manifest (e.g. llm.c's shards) passes. Returns false when there was no manifest.
bool token_split_check_manifest(const std::string& dir, const std::string& separator, int64_t model_vocab_size = 0,
                                double val_ratio = -1);

/// Copy tokens [start, start + count) of the stream into out (int32). Throws on a range past the end.
void token_split_read(const TokenSplit& split, int64_t start, int64_t count, int32_t* out);

/// Batches over a split. batch_size B sequences of seq_len T tokens.
struct BatchStream {
    const TokenSplit* split = nullptr;
    int64_t batch_size = 0;   // B, sequences per batch
    int64_t seq_len = 0;      // T, tokens per sequence
    int64_t num_batches = 0;  // distinct batches: (tokens - 1) / (B*T); batch i reads batch i % num_batches
    int64_t position = 0;     // index of the batch batch_stream_next returns next
};

/// Make a stream starting at batch `position` (a resume). Throws skew::Error, with both numbers,
/// when the split holds fewer than B*T + 1 tokens.
BatchStream batch_stream_make(const TokenSplit& split, int64_t batch_size, int64_t seq_len, int64_t position = 0);

/// Throw skew::Error, naming the split, its token count and both batch counts, unless the stream
/// holds at least `batches` distinct batches (so that many batches never repeat: the paper's
/// single epoch of training steps, or a fixed set of eval_batches validation batches).
void batch_stream_require(const BatchStream& stream, int64_t batches, const std::string& purpose);

/// Fill x and y, each (B, T) int32 row-major, with batch `index`: x[b][t] = s[o + b*T + t],
/// y[b][t] = s[o + b*T + t + 1], o = (index % num_batches) * B*T. Past the last batch the stream
/// wraps to batch 0 (a new epoch, same order).
void batch_stream_get(const BatchStream& stream, int64_t index, int32_t* x, int32_t* y);

/// Fill x and y with the batch at stream.position and advance it by one.
void batch_stream_next(BatchStream& stream, int32_t* x, int32_t* y);

}  // namespace skew::data
