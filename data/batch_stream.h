// The batch stream (docs/design.md "Data"): a split's shards are one token stream; batch i takes tokens
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
    std::string name;                // "train", "val", or the pattern given
    std::vector<std::string> paths;  // shard files, in stream order
    std::vector<std::shared_ptr<MappedShard>> shards;
    std::vector<int64_t> starts;  // (shards + 1) stream offset of each shard's first token
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
/// tokenizer with more tokens than model.vocab_size, or with another --val-ratio. The advice for a
/// larger vocabulary is to raise model.vocab_size or prepare with a smaller tokenizer; a run whose
/// model.vocab_size is fixed (train.init_from's weights) passes `vocab_advice` instead. A directory
/// without a manifest (e.g. llm.c's shards) passes. Returns false when there was no manifest.
bool token_split_check_manifest(const std::string& dir, const std::string& separator, int64_t model_vocab_size = 0,
                                double val_ratio = -1, const std::string& vocab_advice = "");

/// Check the opened shards of a split against dir/manifest.json: the files are the ones the
/// manifest lists for that split (a shard copied in after `skew prepare` would be read silently)
/// and each holds the token count it lists. MD5s are not re-read here (the resume check does, up
/// to 1 GiB). Throws skew::Error naming the file, the manifest and both values. A directory
/// without a manifest passes.
void token_split_check_listed(const std::string& dir, const TokenSplit& split);

/// Copy tokens [start, start + count) of the stream into out (int32). Throws on a range past the end.
void token_split_read(const TokenSplit& split, int64_t start, int64_t count, int32_t* out);

/// Where token `position` of the split's stream lies: its shard file, the token's index in it and
/// its byte offset in the file (1024 + 2 * offset, or 4 * offset in a uint32 shard). Throws
/// skew::Error on a position past the end.
struct ShardPosition {
    std::string path;    // the shard file
    int64_t offset = 0;  // token index within the shard
    int64_t byte = 0;    // byte offset of the token in the file
};
ShardPosition token_split_locate(const TokenSplit& split, int64_t position);

/// Check that tokens[0, count), read from stream positions [start, start + count), are all below
/// vocab_size; throws skew::Error naming the split, the shard file, the token's offset in it (and
/// its byte offset) and the id otherwise (a corrupt shard, or one of a larger tokenizer).
void token_split_check_ids(const TokenSplit& split, int64_t start, const int32_t* tokens, int64_t count,
                           int64_t vocab_size);

/// The first difference between two manifest.json texts of `skew prepare` as far as the data goes:
/// the shard list (file, split, tokens, md5, in order), then the document and token counts;
/// timing and provenance fields ("seconds", "created_by", source paths) are ignored. Empty when
/// they describe the same data. Throws skew::Error when either text is not a JSON object.
std::string manifest_first_difference(const std::string& was_json, const std::string& now_json);

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

/// Check the token ids of batch `index` as batch_stream_get filled x and y (every id below
/// vocab_size): one pass over the B*T + 1 tokens of its window. Throws skew::Error naming the
/// shard file and the token's offset in it (token_split_check_ids).
void batch_stream_check_ids(const BatchStream& stream, int64_t index, const int32_t* x, const int32_t* y,
                            int64_t vocab_size);

}  // namespace skew::data
