// llm.c .bin token shards: whole-file write/read with header checks, and a streaming writer that
// patches the token count into the header on close (docs/data.md, "Shard format (llm.c)").
#include "data/shard.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "engine/error.h"

namespace skew::data {

static void write_header(std::FILE* f, const std::string& path, int64_t tokens) {
    int32_t header[kShardHeaderInts] = {};
    header[0] = kShardMagic;
    header[1] = kShardVersion;
    header[2] = static_cast<int32_t>(tokens);
    if (std::fseek(f, 0, SEEK_SET) != 0 || std::fwrite(header, sizeof header, 1, f) != 1)
        fail("shard: cannot write the header of {}: {}", path, std::strerror(errno));
}

std::string shard_temp_path(const std::string& path) {
    const std::filesystem::path p(path);
    return (p.parent_path() / fmt::format(".{}.tmp-{}", p.filename().string(), ::getpid())).string();
}

bool is_prepare_temp_name(const std::string& file_name) {
    static const std::regex temp(R"(\.((train|val)_[0-9]{6}\.bin|manifest\.json)\.tmp-[0-9]+|((train|val)_[0-9]{6}\.bin|manifest\.json)\.tmp)");
    return std::regex_match(file_name, temp);
}

void shard_writer_open(ShardWriter& w, const std::string& path) {
    w.path = path;
    w.temp = shard_temp_path(path);
    w.tokens = 0;
    w.file = std::fopen(w.temp.c_str(), "wb");
    if (!w.file) fail("shard: cannot create {}: {}", w.temp, std::strerror(errno));
    write_header(w.file, path, 0);
}

void shard_writer_append(ShardWriter& w, std::span<const int32_t> tokens) {
    if (!w.file) fail("shard: {} is not open for writing", w.path);
    if (w.tokens + int64_t(tokens.size()) > kShardMaxTokens)
        fail("shard: {} would exceed llm.c's limit of {} tokens per shard", w.path, kShardMaxTokens);
    uint16_t buf[4096];
    for (size_t i = 0; i < tokens.size();) {
        size_t n = std::min<size_t>(4096, tokens.size() - i);
        for (size_t k = 0; k < n; k++) {
            int32_t t = tokens[i + k];
            if (t < 0 || t > 65535) fail("shard: token id {} does not fit the uint16 layout of {}", t, w.path);
            buf[k] = static_cast<uint16_t>(t);
        }
        if (std::fwrite(buf, sizeof(uint16_t), n, w.file) != n) fail("shard: cannot write {}: {}", w.temp, std::strerror(errno));
        i += n;
    }
    w.tokens += int64_t(tokens.size());
}

int64_t shard_writer_finish(ShardWriter& w) {
    if (!w.file) fail("shard: {} is not open for writing", w.path);
    write_header(w.file, w.path, w.tokens);
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

int64_t shard_check(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("shard: cannot open {}: {}", path, std::strerror(errno));
    int32_t header[kShardHeaderInts];
    size_t got = std::fread(header, sizeof(int32_t), kShardHeaderInts, f);
    std::fclose(f);
    if (got != size_t(kShardHeaderInts))
        fail("shard: {} is truncated: {} bytes, shorter than the 1024-byte header", path, got * sizeof(int32_t));
    if (header[0] != kShardMagic)
        fail("shard: {} has magic {}, expected {} (an llm.c GPT-2 token shard); re-run `skew prepare`", path, header[0], kShardMagic);
    if (header[1] != kShardVersion)
        fail("shard: {} has version {}, expected {} (uint16 tokens)", path, header[1], kShardVersion);
    int64_t tokens = header[2];
    if (tokens < 0) fail("shard: {} declares a negative token count {}", path, tokens);
    int64_t expected = kShardHeaderInts * 4 + 2 * tokens;
    std::error_code ec;
    int64_t size = int64_t(std::filesystem::file_size(path, ec));
    if (ec) fail("shard: cannot stat {}: {}", path, ec.message());
    if (size != expected)
        fail("shard: {} is {} bytes but its header declares {} tokens ({} bytes); the file is truncated or corrupt",
             path, size, tokens, expected);
    return tokens;
}

std::vector<uint16_t> shard_read(const std::string& path) {
    int64_t tokens = shard_check(path);
    std::vector<uint16_t> out(static_cast<size_t>(tokens));
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("shard: cannot open {}: {}", path, std::strerror(errno));
    bool ok = std::fseek(f, kShardHeaderInts * 4, SEEK_SET) == 0 &&
              (tokens == 0 || std::fread(out.data(), sizeof(uint16_t), out.size(), f) == out.size());
    std::fclose(f);
    if (!ok) fail("shard: cannot read the {} tokens of {}", tokens, path);
    return out;
}

}  // namespace skew::data
