// Batch stream over memory-mapped llm.c shards: a split is one stream of tokens (uint16 or uint32 in
// the file, int32 out); batches are
// fixed windows of B*T + 1 tokens B*T apart (docs/design.md "Data"), read straight from the mapping.
#include "data/batch_stream.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/shard.h"
#include "data/split.h"
#include "engine/config_hint.h"
#include "engine/error.h"
#include "engine/json_strict.h"

namespace skew::data {

struct MappedShard {
    void* base = nullptr;
    size_t bytes = 0;
    const unsigned char* tokens = nullptr;  // the first token, after the 1024-byte header
    int token_bytes = 2;                    // 2: uint16, 4: uint32
    ~MappedShard() {
        if (base) munmap(base, bytes);
    }
};

static std::shared_ptr<MappedShard> map_shard(const std::string& path, const ShardHeader& header) {
    auto m = std::make_shared<MappedShard>();
    m->token_bytes = header.token_bytes;
    m->bytes = size_t(kShardHeaderInts * 4 + header.token_bytes * header.tokens);
    int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("shard: cannot open {}: {}", path, std::strerror(errno));
    void* p = mmap(nullptr, m->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED) fail("shard: cannot map {}: {}", path, std::strerror(err));
    m->base = p;
    m->tokens = static_cast<const unsigned char*>(p) + kShardHeaderInts * 4;
    return m;
}

TokenSplit token_split_open_files(const std::vector<std::string>& paths, const std::string& name) {
    TokenSplit split;
    split.name = name;
    split.paths = paths;
    split.starts.push_back(0);
    for (const auto& path : paths) {
        const ShardHeader header = shard_header(path);
        split.shards.push_back(map_shard(path, header));
        split.tokens += header.tokens;
        split.starts.push_back(split.tokens);
    }
    return split;
}

TokenSplit token_split_open(const std::string& dir, const std::string& split) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        fail("data: {} is not a directory of token shards (run `skew prepare --out {}`)", dir, dir);
    std::vector<std::string> paths;
    std::string needle = split + "_";
    for (const auto& entry : fs::directory_iterator(dir)) {
        std::string file = entry.path().filename().string();
        if (is_prepare_temp_name(file))
            fail(
                "data: {} holds {}, a temporary file of an interrupted (or still running) `skew prepare`, so its "
                "shards "
                "are not a complete dataset; re-run `skew prepare --out {}`",
                dir, file, dir);
        if (!entry.is_regular_file() || file.size() < 4 || file.substr(file.size() - 4) != ".bin") continue;
        size_t at = file.find(needle);
        if (at == 0 || (at != std::string::npos && file[at - 1] == '_')) paths.push_back(entry.path().string());
    }
    if (paths.empty())
        fail("data: no {} shards (*{}_*.bin) in {}; run `skew prepare --out {}`", split, split, dir, dir);
    std::sort(paths.begin(), paths.end());
    return token_split_open_files(paths, split);
}

// dir/manifest.json parsed into `m` (path set); false when there is none. Throws naming the file when
// it is not a JSON object.
static bool read_manifest(const std::string& dir, nlohmann::json& m, std::string& path) {
    path = (std::filesystem::path(dir) / "manifest.json").string();
    std::ifstream f(path);
    if (!f) return false;
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::string json_error;
    if (!json_try_parse_strict(text, m, json_error))
        fail("data: {} is not valid JSON ({}); re-run `skew prepare --out {}`", path, json_error, dir);
    if (!m.is_object()) fail("data: {} is not a JSON object; re-run `skew prepare --out {}`", path, dir);
    return true;
}

bool token_split_check_manifest(const std::string& dir, const std::string& separator, int64_t model_vocab_size,
                                double val_ratio, const std::string& vocab_advice) {
    nlohmann::json m;
    std::string path;
    if (!read_manifest(dir, m, path)) return false;
    const std::string prepared = json_string_or(m, "separator", "", path);
    if (prepared != separator)
        fail(
            "data: the config says data.separator: {}, but the shards in {} were prepared with separator {} ({}); "
            "re-run `skew prepare --separator {}` or change data.separator",
            separator, dir, prepared, path, separator);
    const auto tok = m.find("tokenizer");
    if (model_vocab_size > 0 && tok != m.end() && tok->is_object() && tok->contains("vocab_size") &&
        (*tok)["vocab_size"].is_number_integer()) {
        const int64_t data_vocab = (*tok)["vocab_size"].get<int64_t>();
        if (data_vocab > model_vocab_size)
            fail("data: the shards in {} hold token ids of a {}-token vocabulary ({}), but model.vocab_size is {}; {}",
                 dir, data_vocab, path, model_vocab_size,
                 !vocab_advice.empty()
                     ? vocab_advice
                     : fmt::format("set model.vocab_size to at least {} or prepare the data with a smaller tokenizer",
                                   data_vocab));
    }
    // The split is made by `skew prepare`; data.val_ratio says which split the run expects.
    const auto split = m.find("split");
    if (val_ratio >= 0 && split != m.end() && split->is_object() && split->contains("val_ratio") &&
        (*split)["val_ratio"].is_number()) {
        const double prepared_ratio = (*split)["val_ratio"].get<double>();
        const int prepared_buckets = split->contains("train_buckets") && (*split)["train_buckets"].is_number_integer()
                                         ? (*split)["train_buckets"].get<int>()
                                         : split_train_buckets(prepared_ratio);
        if (prepared_buckets != split_train_buckets(val_ratio)) {
            // Propose the data's ratio only where the schema accepts it (0, no validation split, it does not).
            const std::string set = config_set_hint("data.val_ratio", fmt::format("{}", prepared_ratio));
            fail(
                "data: the config says data.val_ratio: {}, but the shards in {} were prepared with --val-ratio {} "
                "({}); "
                "re-run `skew prepare --val-ratio {}`{}",
                val_ratio, dir, prepared_ratio, path, val_ratio,
                set.empty()
                    ? fmt::format(" (a run needs a validation split: data.val_ratio {} is not allowed)", prepared_ratio)
                    : " or " + set);
        }
    }
    return true;
}

void token_split_check_listed(const std::string& dir, const TokenSplit& split) {
    nlohmann::json m;
    std::string path;
    if (!read_manifest(dir, m, path) || !m.contains("shards") || !m["shards"].is_array()) return;
    std::map<std::string, int64_t> listed;  // this split's shards: file -> tokens
    for (const auto& s : m["shards"])
        if (s.is_object() && json_string_or(s, "split", "", path + " shards") == split.name)
            listed[json_string_or(s, "file", "", path + " shards")] = json_int_or(s, "tokens", -1, path + " shards");
    for (size_t i = 0; i < split.paths.size(); ++i) {
        const std::string file = std::filesystem::path(split.paths[i]).filename().string();
        const auto it = listed.find(file);
        if (it == listed.end())
            fail(
                "data: {} holds {}, a {} shard that {} does not list (copied in after `skew prepare`?): remove it, or "
                "re-run `skew prepare --out {}`",
                dir, file, split.name, path, dir);
        const int64_t held = split.starts[i + 1] - split.starts[i];
        if (it->second != held)
            fail(
                "data: {} holds {} tokens, but {} lists {} for it (the shard or the manifest was changed after `skew "
                "prepare`): re-run `skew prepare --out {}`",
                split.paths[i], held, path, it->second, dir);
        listed.erase(it);
    }
    if (!listed.empty())
        fail("data: {} lists {} shard {}, which {} does not hold: re-run `skew prepare --out {}`", path, split.name,
             listed.begin()->first, dir, dir);
}

void token_split_read(const TokenSplit& split, int64_t start, int64_t count, int32_t* out) {
    if (start < 0 || count < 0 || start + count > split.tokens)
        fail("data: tokens [{}, {}) are outside split {} of {} tokens", start, start + count, split.name, split.tokens);
    size_t s = size_t(std::upper_bound(split.starts.begin(), split.starts.end(), start) - split.starts.begin()) - 1;
    while (count > 0) {
        int64_t offset = start - split.starts[s];
        int64_t n = std::min(count, split.starts[s + 1] - start);
        const MappedShard& m = *split.shards[s];
        if (m.token_bytes == 4) {  // ids past INT32_MAX become negative: token_split_check_ids refuses them
            const unsigned char* src = m.tokens + 4 * offset;
            for (int64_t i = 0; i < n; i++) {
                uint32_t v;
                std::memcpy(&v, src + 4 * i, 4);
                out[i] = int32_t(v);
            }
        } else {
            const unsigned char* src = m.tokens + 2 * offset;
            for (int64_t i = 0; i < n; i++) {
                uint16_t v;
                std::memcpy(&v, src + 2 * i, 2);
                out[i] = v;
            }
        }
        out += n;
        start += n;
        count -= n;
        s++;
    }
}

ShardPosition token_split_locate(const TokenSplit& split, int64_t position) {
    if (position < 0 || position >= split.tokens)
        fail("data: token {} is outside split {} of {} tokens", position, split.name, split.tokens);
    // The last shard starting at or before position that is not empty.
    const size_t s =
        size_t(std::upper_bound(split.starts.begin(), split.starts.end(), position) - split.starts.begin()) - 1;
    const int64_t offset = position - split.starts[s];
    return ShardPosition{split.paths[s], offset, kShardHeaderInts * 4 + split.shards[s]->token_bytes * offset};
}

void token_split_check_ids(const TokenSplit& split, int64_t start, const int32_t* tokens, int64_t count,
                           int64_t vocab_size) {
    for (int64_t i = 0; i < count; i++) {
        if (tokens[i] >= 0 && tokens[i] < vocab_size) continue;
        const ShardPosition at = token_split_locate(split, start + i);
        fail(
            "data: split {}: token id {} at offset {} of shard {} (byte {}) is outside the model's vocabulary "
            "(model.vocab_size {}); the shard is corrupt or was prepared with a larger tokenizer (re-run `skew "
            "prepare`)",
            split.name, tokens[i], at.offset, at.path, at.byte, vocab_size);
    }
}

std::string manifest_first_difference(const std::string& was_json, const std::string& now_json) {
    using nlohmann::json;
    json was, now;
    std::string error;
    if (!json_try_parse_strict(was_json, was, error))
        fail("data: the run's copy of manifest.json is not a JSON object: {}", error);
    if (!json_try_parse_strict(now_json, now, error)) fail("data: manifest.json is not a JSON object: {}", error);
    if (!was.is_object()) fail("data: the run's copy of manifest.json is not a JSON object");
    if (!now.is_object()) fail("data: manifest.json is not a JSON object");
    auto field = [](const json& m, const char* key) { return m.contains(key) ? m[key] : json(); };
    const json ws = field(was, "shards"), ns = field(now, "shards");
    const size_t wn = ws.is_array() ? ws.size() : 0, nn = ns.is_array() ? ns.size() : 0;
    for (size_t i = 0; i < std::min(wn, nn); i++) {
        const json &a = ws[i], &b = ns[i];
        for (const char* key : {"file", "split", "tokens", "md5"}) {
            const json va = a.is_object() ? field(a, key) : json(), vb = b.is_object() ? field(b, key) : json();
            if (va != vb)
                return fmt::format("shard {} ({}): {} {} in the run's copy, {} now", i + 1,
                                   a.is_object() ? field(a, "file").dump() : "?", key, va.dump(), vb.dump());
        }
    }
    if (wn != nn) {
        const json& extra = wn > nn ? ws[nn] : ns[wn];
        return fmt::format("{} shards in the run's copy, {} now (first unmatched: {})", wn, nn,
                           extra.is_object() ? field(extra, "file").dump() : extra.dump());
    }
    for (const char* group : {"documents", "tokens"}) {
        const json a = field(was, group), b = field(now, group);
        if (a == b) continue;
        if (a.is_object() && b.is_object()) {
            for (const auto& [k, v] : a.items())
                if (!b.contains(k) || b[k] != v)
                    return fmt::format("{}.{}: {} in the run's copy, {} now", group, k, v.dump(),
                                       b.contains(k) ? b[k].dump() : "absent");
            for (const auto& [k, v] : b.items())
                if (!a.contains(k)) return fmt::format("{}.{}: absent in the run's copy, {} now", group, k, v.dump());
        }
        return fmt::format("{}: {} in the run's copy, {} now", group, a.dump(), b.dump());
    }
    return "";
}

BatchStream batch_stream_make(const TokenSplit& split, int64_t batch_size, int64_t seq_len, int64_t position) {
    if (batch_size <= 0 || seq_len <= 0)
        fail("data: batch_size ({}) and seq_len ({}) must be positive", batch_size, seq_len);
    if (position < 0) fail("data: batch position {} must be non-negative", position);
    int64_t need = batch_size * seq_len + 1;
    if (split.tokens < need)
        fail(
            "data: split {} holds {} tokens, fewer than the {} one batch needs (batch_size {} x seq_len {} + 1); "
            "prepare more text or lower batch_size/seq_len",
            split.name, split.tokens, need, batch_size, seq_len);
    BatchStream s;
    s.split = &split;
    s.batch_size = batch_size;
    s.seq_len = seq_len;
    s.num_batches = (split.tokens - 1) / (batch_size * seq_len);
    s.position = position;
    return s;
}

void batch_stream_require(const BatchStream& stream, int64_t batches, const std::string& purpose) {
    if (!stream.split) fail("data: batch stream used before batch_stream_make");
    if (stream.num_batches < batches)
        fail(
            "data: {} needs {} distinct batches of {} x {} tokens, but split {} holds {} tokens, only {} batches; "
            "prepare more text or lower the count",
            purpose, batches, stream.batch_size, stream.seq_len, stream.split->name, stream.split->tokens,
            stream.num_batches);
}

void batch_stream_get(const BatchStream& stream, int64_t index, int32_t* x, int32_t* y) {
    if (!stream.split) fail("data: batch stream used before batch_stream_make");
    if (index < 0) fail("data: batch index {} must be non-negative", index);
    const int64_t n = stream.batch_size * stream.seq_len;
    const int64_t start = (index % stream.num_batches) * n;
    std::vector<int32_t> window(size_t(n + 1));
    token_split_read(*stream.split, start, n + 1, window.data());
    std::copy(window.begin(), window.end() - 1, x);
    std::copy(window.begin() + 1, window.end(), y);
}

void batch_stream_next(BatchStream& stream, int32_t* x, int32_t* y) {
    batch_stream_get(stream, stream.position, x, y);
    stream.position++;
}

void batch_stream_check_ids(const BatchStream& stream, int64_t index, const int32_t* x, const int32_t* y,
                            int64_t vocab_size) {
    if (!stream.split) fail("data: batch stream used before batch_stream_make");
    const int64_t n = stream.batch_size * stream.seq_len;
    const int64_t start = (index % stream.num_batches) * n;
    token_split_check_ids(*stream.split, start, x, n, vocab_size);              // the window's first B*T tokens
    token_split_check_ids(*stream.split, start + n, y + n - 1, 1, vocab_size);  // and its last
}

}  // namespace skew::data
