// Shard identity of a run (see shard_identity.h): sizes and MD5s (OpenSSL EVP) of every shard.
#include "data/shard_identity.h"

#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/prepare.h"
#include "engine/error.h"
#include "engine/json_strict.h"

namespace skew::data {
namespace fs = std::filesystem;

namespace {

constexpr int64_t SAMPLE_BYTES = int64_t(1) << 20;

// MD5 (hex) of the file's size, first SAMPLE_BYTES and last SAMPLE_BYTES.
std::string md5_sampled(const std::string& path, int64_t bytes) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("data: cannot open {} to hash it", path);
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_md5(), nullptr);
    const std::string size_text = std::to_string(bytes);
    EVP_DigestUpdate(ctx, size_text.data(), size_text.size());
    std::vector<char> buf(static_cast<size_t>(SAMPLE_BYTES));
    for (int64_t at : {int64_t(0), std::max<int64_t>(0, bytes - SAMPLE_BYTES)}) {
        f.clear();
        f.seekg(at);
        f.read(buf.data(), std::streamsize(std::min(SAMPLE_BYTES, bytes)));
        if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), size_t(f.gcount()));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, digest, &len);
    EVP_MD_CTX_free(ctx);
    std::string out;
    for (unsigned i = 0; i < len; i++) out += fmt::format("{:02x}", digest[i]);
    return out;
}

}  // namespace

nlohmann::json shard_identity(const std::vector<const TokenSplit*>& splits) {
    int64_t total = 0;
    for (const TokenSplit* s : splits)
        for (const auto& p : s->paths) {
            std::error_code ec;
            const auto n = fs::file_size(p, ec);
            if (ec) fail("data: cannot read the size of shard {}: {}", p, ec.message());
            total += int64_t(n);
        }
    const bool whole = total <= kShardIdentityFullHashBytes;
    nlohmann::json shards = nlohmann::json::array();
    for (const TokenSplit* s : splits)
        for (const auto& p : s->paths) {
            const int64_t bytes = int64_t(fs::file_size(p));
            nlohmann::json e = {{"split", s->name}, {"file", fs::path(p).filename().string()}, {"bytes", bytes}};
            if (whole) e["md5"] = md5_file(p);
            else e["md5_sampled"] = md5_sampled(p, bytes);
            shards.push_back(std::move(e));
        }
    return {{"shards", shards}};
}

std::string shard_identity_difference(const nlohmann::json& was, const nlohmann::json& now) {
    using nlohmann::json;
    auto list = [](const json& j) {
        return j.is_object() && j.contains("shards") && j["shards"].is_array() ? j["shards"] : json::array();
    };
    const json ws = list(was), ns = list(now);
    auto field = [](const json& e, const char* key) { return e.is_object() && e.contains(key) ? e[key] : json(); };
    for (size_t i = 0; i < std::min(ws.size(), ns.size()); i++) {
        for (const char* key : {"split", "file", "bytes", "md5", "md5_sampled"}) {
            const json a = field(ws[i], key), b = field(ns[i], key);
            if (a.is_null() && b.is_null()) continue;
            if (a != b)
                return fmt::format("shard {} ({}): {} {} in the run's record, {} now", i + 1,
                                   field(ws[i], "file").dump(), key, a.dump(), b.dump());
        }
    }
    if (ws.size() != ns.size()) {
        const json& extra = ws.size() > ns.size() ? ws[ns.size()] : ns[ws.size()];
        return fmt::format("{} shards in the run's record, {} now (first unmatched: {})", ws.size(), ns.size(),
                           field(extra, "file").dump());
    }
    return "";
}

void shard_identity_check(const std::string& run_dir, const std::string& data_dir,
                          const std::vector<const TokenSplit*>& splits) {
    const fs::path path = fs::path(run_dir) / kShardIdentityFile;
    std::error_code ec;
    if (!fs::exists(path, ec)) return;
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("--resume {}: cannot open {}", run_dir, path.string());
    std::stringstream ss;
    ss << in.rdbuf();
    const nlohmann::json was = json_parse_strict(ss.str(), path.string());
    // Hash the way the record was made: whole files, or sampled ones.
    const std::string diff = shard_identity_difference(was, shard_identity(splits));
    if (!diff.empty())
        fail(
            "--resume {}: the shards in {} are not the ones the run started with: {} (recorded in {}); resuming would "
            "mix "
            "two datasets in one run (restore the data, or start a new run with --out)",
            run_dir, data_dir, diff, path.string());
}

}  // namespace skew::data
