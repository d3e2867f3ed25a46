// llm.c .bin token shards: whole-file write/read with header checks, and a streaming writer that
// patches the token count into the header on close (docs/data.md, "Shard format (llm.c)").
#include "data/shard.h"

#include <climits>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "engine/error.h"

namespace skew::data {

static void write_header(std::FILE* f, const std::string& path, int64_t tokens, int token_bytes) {
    int32_t header[kShardHeaderInts] = {};
    header[0] = token_bytes == 4 ? kShardMagicU32 : kShardMagic;
    header[1] = token_bytes == 4 ? kShardVersionU32 : kShardVersion;
    header[2] = static_cast<int32_t>(tokens);
    if (std::fseek(f, 0, SEEK_SET) != 0 || std::fwrite(header, sizeof header, 1, f) != 1)
        fail("shard: cannot write the header of {}: {}", path, std::strerror(errno));
}

std::string shard_temp_path(const std::string& path) {
    const std::filesystem::path p(path);
    return (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
}

bool is_prepare_temp_name(const std::string& file_name) {
    static const std::regex temp(
        R"(\.((train|val)_[0-9]{6}\.bin|manifest\.json)\.tmp-[0-9]+|((train|val)_[0-9]{6}\.bin|manifest\.json)\.tmp)");
    return std::regex_match(file_name, temp);
}

void shard_writer_open(ShardWriter& w, const std::string& path, int token_bytes) {
    if (token_bytes != 2 && token_bytes != 4) fail("shard: {}: tokens are 2 or 4 bytes, not {}", path, token_bytes);
    w.path = path;
    w.temp = shard_temp_path(path);
    w.tokens = 0;
    w.token_bytes = token_bytes;
    w.file = std::fopen(w.temp.c_str(), "wb");
    if (!w.file) fail("shard: cannot create {}: {}", w.temp, std::strerror(errno));
    write_header(w.file, path, 0, token_bytes);
}

// Write n tokens of type T (uint16_t or uint32_t), each checked against T's range.
template <typename T>
static void append_as(ShardWriter& w, std::span<const int32_t> tokens) {
    T buf[4096];
    for (size_t i = 0; i < tokens.size();) {
        size_t n = std::min<size_t>(4096, tokens.size() - i);
        for (size_t k = 0; k < n; k++) {
            int32_t t = tokens[i + k];
            if (t < 0 || (sizeof(T) == 2 && t > 65535))
                fail("shard: token id {} does not fit the uint{} layout of {}", t, 8 * sizeof(T), w.path);
            buf[k] = static_cast<T>(t);
        }
        if (std::fwrite(buf, sizeof(T), n, w.file) != n)
            fail("shard: cannot write {}: {}", w.temp, std::strerror(errno));
        i += n;
    }
}

void shard_writer_append(ShardWriter& w, std::span<const int32_t> tokens) {
    if (!w.file) fail("shard: {} is not open for writing", w.path);
    if (w.tokens + int64_t(tokens.size()) > kShardMaxTokens)
        fail("shard: {} would exceed llm.c's limit of {} tokens per shard", w.path, kShardMaxTokens);
    if (w.token_bytes == 4) append_as<uint32_t>(w, tokens);
    else append_as<uint16_t>(w, tokens);
    w.tokens += int64_t(tokens.size());
}

int64_t shard_writer_finish(ShardWriter& w) {
    if (!w.file) fail("shard: {} is not open for writing", w.path);
    write_header(w.file, w.path, w.tokens, w.token_bytes);
    bool ok = std::fflush(w.file) == 0;
    ok = (std::fclose(w.file) == 0) && ok;
    w.file = nullptr;
    if (!ok) {
        std::remove(w.temp.c_str());
        fail("shard: cannot finish {}: {}", w.temp, std::strerror(errno));
    }
    return w.tokens;
}

int64_t shard_writer_close(ShardWriter& w) {
    const int64_t tokens = shard_writer_finish(w);
    std::error_code ec;
    std::filesystem::rename(w.temp, w.path, ec);
    if (ec) {
        std::remove(w.temp.c_str());
        fail("shard: cannot rename {} to {}: {}", w.temp, w.path, ec.message());
    }
    return tokens;
}

ShardWriter::~ShardWriter() {
    if (file) {
        std::fclose(file);
        std::remove(temp.c_str());
    }
}

void shard_write(const std::string& path, std::span<const uint16_t> tokens) {
    ShardWriter w;
    shard_writer_open(w, path);
    if (int64_t(tokens.size()) > kShardMaxTokens) fail("shard: {} would exceed {} tokens", path, kShardMaxTokens);
    if (!tokens.empty() && std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), w.file) != tokens.size())
        fail("shard: cannot write {}: {}", w.temp, std::strerror(errno));
    w.tokens = int64_t(tokens.size());
    shard_writer_close(w);
}

ShardHeader shard_header(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("shard: cannot open {}: {}", path, std::strerror(errno));
    int32_t header[kShardHeaderInts];
    size_t got = std::fread(header, sizeof(int32_t), kShardHeaderInts, f);
    std::fclose(f);
    if (got != size_t(kShardHeaderInts))
        fail("shard: {} is truncated: {} bytes, shorter than the 1024-byte header", path, got * sizeof(int32_t));
    ShardHeader h;
    if (header[0] == kShardMagic) {
        if (header[1] != kShardVersion)
            fail("shard: {} has version {}, expected {} (uint16 tokens)", path, header[1], kShardVersion);
        h.token_bytes = 2;
    } else if (header[0] == kShardMagicU32) {
        if (header[1] != kShardVersionU32)
            fail("shard: {} has magic {} (llm.c's uint32 layout) with version {}, expected {}", path, header[0],
                 header[1], kShardVersionU32);
        h.token_bytes = 4;
    } else {
        fail(
            "shard: {} has magic {}, expected {} (an llm.c token shard of uint16 tokens) or {} (of uint32 tokens); "
            "re-run `skew prepare`",
            path, header[0], kShardMagic, kShardMagicU32);
    }
    h.tokens = header[2];
    if (h.tokens < 0) fail("shard: {} declares a negative token count {}", path, h.tokens);
    int64_t expected = kShardHeaderInts * 4 + h.token_bytes * h.tokens;
    std::error_code ec;
    int64_t size = int64_t(std::filesystem::file_size(path, ec));
    if (ec) fail("shard: cannot stat {}: {}", path, ec.message());
    if (size != expected)
        fail("shard: {} is {} bytes but its header declares {} tokens ({} bytes); the file is truncated or corrupt",
             path, size, h.tokens, expected);
    return h;
}

int64_t shard_check(const std::string& path) { return shard_header(path).tokens; }

// The tokens of a validated shard as T (its own token type).
template <typename T>
static std::vector<T> read_tokens(const std::string& path, int64_t tokens) {
    std::vector<T> out(static_cast<size_t>(tokens));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("shard: cannot open {}: {}", path, std::strerror(errno));
    bool ok = std::fseek(f, kShardHeaderInts * 4, SEEK_SET) == 0 &&
              (tokens == 0 || std::fread(out.data(), sizeof(T), out.size(), f) == out.size());
    std::fclose(f);
    if (!ok) fail("shard: cannot read the {} tokens of {}", tokens, path);
    return out;
}

std::vector<uint16_t> shard_read(const std::string& path) {
    const ShardHeader h = shard_header(path);
    if (h.token_bytes != 2) fail("shard: {} holds uint32 tokens, not uint16 ones", path);
    return read_tokens<uint16_t>(path, h.tokens);
}

std::vector<int32_t> shard_read_ids(const std::string& path) {
    const ShardHeader h = shard_header(path);
    std::vector<int32_t> out;
    if (h.token_bytes == 4) {
        for (uint32_t t : read_tokens<uint32_t>(path, h.tokens)) {
            if (t > uint32_t(INT32_MAX)) fail("shard: {} holds token id {}, beyond any vocabulary", path, t);
            out.push_back(int32_t(t));
        }
    } else {
        const std::vector<uint16_t> t = read_tokens<uint16_t>(path, h.tokens);
        out.assign(t.begin(), t.end());
    }
    return out;
}

}  // namespace skew::data
