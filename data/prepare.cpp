// The preparation pipeline: read chunks of records on a helper thread, parse + split + tokenize each
// chunk in parallel (OpenMP, one tokenizer workspace per thread), append them in input order to the train and
// val shard writers, rotate shards at shard_tokens, then put every shard and manifest.json in place
// together (docs/design.md "Data"). Until then all output is hidden temporaries, so an earlier dataset in
// the folder stays whole if this run fails or is interrupted.
#include "data/prepare.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <set>

#include "data/reader.h"
#include "data/shard.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "data/tokenizer_identity.h"
#include "engine/dir_lock.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/process_env.h"
#include "engine/text.h"

namespace skew::data {
namespace fs = std::filesystem;

std::string md5_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("data: cannot open {} to hash it", path);
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_md5(), nullptr);
    std::vector<char> buf(1 << 20);
    while (f) {
        f.read(buf.data(), std::streamsize(buf.size()));
        if (f.gcount() > 0) EVP_DigestUpdate(ctx, buf.data(), size_t(f.gcount()));
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, digest, &len);
    EVP_MD_CTX_free(ctx);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; i++) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 15]);
    }
    return out;
}

namespace {

// A finished shard, still under its hidden temporary name until the run puts all in place.
struct FinishedShard {
    std::string path;  // final name
    std::string temp;  // written, closed, not yet renamed
    int64_t tokens = 0;
};

// The shards of one split, rotated every shard_tokens tokens: <out>/<name>_000000.bin, ...
struct SplitOutput {
    std::string name;
    std::string dir;
    int64_t shard_tokens = 0;
    int token_bytes = 2;                // 2: uint16 shards, 4: uint32 (a vocabulary past 65,536 ids)
    ShardWriter writer;                 // the open shard (its temporary is removed if never finished)
    std::vector<FinishedShard> shards;  // finished shards, in order
    int64_t tokens = 0;
    int64_t documents = 0;
    bool placed = false;  // the shards were renamed into place
    ~SplitOutput() {      // a failed run leaves no temporary behind
        if (!placed)
            for (const auto& sh : shards) std::remove(sh.temp.c_str());
    }
};

std::string shard_path(const SplitOutput& s, size_t index) {
    char file[64];
    std::snprintf(file, sizeof file, "%s_%06zu.bin", s.name.c_str(), index);
    return (fs::path(s.dir) / file).string();
}

void split_open(SplitOutput& s) { shard_writer_open(s.writer, shard_path(s, s.shards.size()), s.token_bytes); }

void split_finish(SplitOutput& s) {
    const int64_t tokens = shard_writer_finish(s.writer);
    s.shards.push_back(FinishedShard{s.writer.path, s.writer.temp, tokens});
}

void split_append(SplitOutput& s, std::span<const int32_t> tokens) {
    while (!tokens.empty()) {
        int64_t room = s.shard_tokens - s.writer.tokens;
        if (room == 0) {
            split_finish(s);
            split_open(s);
            continue;
        }
        size_t n = size_t(std::min<int64_t>(room, int64_t(tokens.size())));
        shard_writer_append(s.writer, tokens.first(n));
        s.tokens += int64_t(n);
        tokens = tokens.subspan(n);
    }
}

// Remove the temporaries a killed earlier run left in dir (is_prepare_temp_name); returns how many.
int remove_stale_temps(const std::string& dir) {
    int removed = 0;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        if (!is_prepare_temp_name(it->path().filename().string())) continue;
        std::error_code rm;
        if (!fs::remove(it->path(), rm) || rm)
            fail("prepare: cannot remove the stale temporary {}: {}", it->path().string(), rm.message());
        removed++;
    }
    if (ec) fail("prepare: cannot list {}: {}", dir, ec.message());
    return removed;
}

// Removes out_dir at the end of a failed run when this run created it and left it empty.
struct CreatedDir {
    std::string path;
    bool created = false, done = false;
    ~CreatedDir() {
        std::error_code ec;
        if (created && !done && fs::is_empty(path, ec) && !ec) fs::remove(path, ec);
    }
};

std::string human_duration(double seconds) {
    if (!(seconds >= 0) || seconds > 1e7) return "--:--";
    int64_t s = int64_t(seconds + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                  (long long)(s % 60));
    return buf;
}

// One line on stderr, redrawn in place: documents, MB read, MB/s, ETA, a bar.
void draw_progress(int64_t documents, int64_t consumed, int64_t total, int64_t text_bytes, double seconds, bool final) {
    double frac = total > 0 ? double(consumed) / double(total) : 1.0;
    double mbps = seconds > 0 ? double(text_bytes) / 1e6 / seconds : 0.0;
    double eta = frac > 0.01 && seconds > 1.0 ? seconds * (1.0 - frac) / frac : -1;  // unknown until a little is done
    const int width = 24;
    int filled = int(frac * width + 0.5);
    std::string bar =
        std::string(size_t(std::min(filled, width)), '#') + std::string(size_t(width - std::min(filled, width)), '.');
    std::fprintf(stderr, "\rprepare [%s] %3.0f%%  %lld documents  %.1f MB  %.1f MB/s  %s %s   ", bar.c_str(),
                 frac * 100, (long long)documents, double(text_bytes) / 1e6, mbps, final ? "took" : "ETA",
                 human_duration(final ? seconds : eta).c_str());
    if (final) std::fprintf(stderr, "\n");
    std::fflush(stderr);
}

}  // namespace

static PrepareSummary prepare_impl(const PrepareOptions& o) {
    auto t0 = std::chrono::steady_clock::now();
    if (o.separator != "eot" && o.separator != "none")
        fail("prepare: separator must be eot or none, got \"{}\"", o.separator);
    if (o.out_dir.empty()) fail("prepare: --out is required");
    if (o.shard_tokens <= 0 || o.shard_tokens > kShardMaxTokens)
        fail("prepare: shard_tokens must be in [1, {}], got {}", kShardMaxTokens, o.shard_tokens);
    const int train_buckets = split_train_buckets(o.val_ratio);
    Tokenizer tok = tokenizer_load(o.tokenizer_dir);
    if (o.separator == "eot" && tok.eot < 0)
        fail(
            "prepare: --separator eot needs an end-of-text token, and {} has none (a special token {}); use "
            "--separator none",
            tok.source, fmt::join(kEndOfTextNames, ", "));
    auto files = expand_inputs(o.inputs);
    DocumentReader reader = document_reader_open(files);

    std::error_code ec;
    CreatedDir out_dir{o.out_dir};
    out_dir.created = !fs::exists(o.out_dir, ec);
    fs::create_directories(o.out_dir, ec);
    if (ec) fail("prepare: cannot create {}: {}", o.out_dir, ec.message());
    // An exclusive flock on <out>/.skew-prepare.lock for the whole run, before anything in the folder
    // is touched: a second prepare into the same folder fails at once instead of deleting the first's
    // live temporaries.
    DirLock lock;
    dir_lock(lock, o.out_dir, ".skew-prepare.lock", "skew prepare");
    if (int stale = remove_stale_temps(o.out_dir))
        spdlog::info("prepare: removed {} temporary files of an interrupted earlier run from {}", stale, o.out_dir);

    const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
    std::vector<std::unique_ptr<TokenizerWorkspace>> workspaces;
    for (int t = 0; t < threads; t++) workspaces.push_back(std::make_unique<TokenizerWorkspace>());

    SplitOutput train, val;
    train.name = "train";
    val.name = "val";
    for (SplitOutput* s : {&train, &val}) {
        s->dir = o.out_dir;
        s->shard_tokens = o.shard_tokens;
        s->token_bytes = shard_token_bytes_for(tok.vocab_size());
        split_open(*s);
    }
    std::vector<int64_t> bad_per_source(files.size(), 0), empty_per_source(files.size(), 0);
    PrepareSummary summary;
    const bool tty = o.progress && output_is_terminal(fileno(stderr));
    auto last_draw = std::chrono::steady_clock::now();

    // A chunk of records and, for each, how far into the input files the reader was after it (for the ETA).
    struct Chunk {
        std::vector<DocumentRecord> records;
        std::vector<int64_t> consumed;
    };
    // Reads the next chunk; false when the input is exhausted. Runs on a helper thread while the
    // previous chunk is tokenized, so at most two chunks are in memory.
    auto read_chunk = [&reader, &o](Chunk& c) {
        c.records.clear();
        c.consumed.clear();
        int64_t bytes = 0;
        while (bytes < o.chunk_bytes) {
            c.records.emplace_back();
            if (!document_reader_next(reader, c.records.back())) {
                c.records.pop_back();
                return false;
            }
            bytes += int64_t(c.records.back().raw.size());
            c.consumed.push_back(reader.consumed_file_bytes);
        }
        return true;
    };
    const int64_t total_file_bytes = reader.total_file_bytes;
    Chunk chunk, next;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<std::string> errors;
    std::vector<char> is_train, is_empty, bad_utf8;
    // A stop request (Ctrl-C) fails the run here: the destructors remove the temporaries, the lock
    // file and a folder this run created, so nothing half-written is left.
    auto check_stop = [&o] {
        if (o.stop_requested && o.stop_requested())
            fail("prepare: interrupted before the shards were complete; nothing was placed into {}", o.out_dir);
    };
    bool more = read_chunk(chunk);
    while (!chunk.records.empty()) {
        check_stop();
        std::future<bool> prefetch;
        if (more) prefetch = std::async(std::launch::async, read_chunk, std::ref(next));
        // Parse, split and tokenize in parallel.
        const auto& records = chunk.records;
        const int64_t n = int64_t(records.size());
        tokens.assign(size_t(n), {});
        errors.assign(size_t(n), {});
        is_train.assign(size_t(n), 0);
        is_empty.assign(size_t(n), 0);
        bad_utf8.assign(size_t(n), 0);
        std::vector<int64_t> text_bytes(size_t(n), 0);
        std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
        for (int64_t i = 0; i < n; i++) {
            try {
                std::string parsed;
                const std::string* text = &records[i].raw;
                if (records[i].is_json) {
                    if (!document_parse(records[i], o.field, parsed, errors[i])) continue;
                    text = &parsed;
                }
                if (text->empty()) {  // nothing to learn from: an EOT alone would be a fake document
                    is_empty[i] = 1;
                    continue;
                }
                bad_utf8[i] = !utf8_valid(*text);
                text_bytes[i] = int64_t(text->size());
                is_train[i] = split_bucket(*text) < train_buckets;
                tokenizer_encode(tok, *text, tokens[i], *workspaces[size_t(omp_get_thread_num())], o.allow_special);
            } catch (...) {
#pragma omp critical
                failure = std::current_exception();
            }
        }
        if (failure) std::rethrow_exception(failure);
        // Append in input order.
        const int32_t eot = tok.eot;
        for (int64_t i = 0; i < n; i++) {
            if (i % 64 == 0) check_stop();
            const auto& rec = records[i];
            if (!errors[i].empty()) {
                const std::string& path = reader.sources[rec.source].path;
                if (!o.skip_bad_lines)
                    fail("prepare: {}:{}: {} (use --bad-lines skip to skip such lines)", path, rec.line, errors[i]);
                if (summary.bad_lines < 10) spdlog::warn("prepare: {}:{}: {}; line skipped", path, rec.line, errors[i]);
                summary.bad_lines++;
                bad_per_source[rec.source]++;
                continue;
            }
            if (is_empty[i]) {
                summary.empty_skipped++;
                empty_per_source[rec.source]++;
                continue;
            }
            if (bad_utf8[i] && summary.invalid_utf8++ == 0) {
                const std::string& path = reader.sources[rec.source].path;
                summary.first_invalid_utf8 = rec.line > 0 ? fmt::format("{}:{}", path, rec.line) : path;
            }
            SplitOutput& out = is_train[i] ? train : val;
            if (o.separator == "eot") split_append(out, std::span<const int32_t>(&eot, 1));
            split_append(out, tokens[i]);
            out.documents++;
            summary.bytes += text_bytes[i];
            std::vector<int32_t>().swap(tokens[i]);
            if (tty && (i % 256 == 0 || i == n - 1)) {
                auto now = std::chrono::steady_clock::now();
                if (now - last_draw > std::chrono::milliseconds(200)) {
                    draw_progress(train.documents + val.documents, chunk.consumed[i], total_file_bytes, summary.bytes,
                                  std::chrono::duration<double>(now - t0).count(), false);
                    last_draw = now;
                }
            }
        }
        if (!more) break;  // nothing was prefetched: that was the last chunk
        more = prefetch.get();
        std::swap(chunk, next);
    }
    check_stop();
    split_finish(train);
    split_finish(val);
    summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty)
        draw_progress(train.documents + val.documents, total_file_bytes, total_file_bytes, summary.bytes,
                      summary.seconds, true);
    if (summary.bad_lines > 10) spdlog::warn("prepare: {} bad lines skipped in all ({} shown)", summary.bad_lines, 10);
    if (summary.invalid_utf8)
        spdlog::warn(
            "prepare: {} document{} not valid UTF-8 (the first: {}); {} bytes were tokenized as byte tokens "
            "(a SentencePiece model reads them as U+FFFD); convert such files to UTF-8 (e.g. iconv) if that is not "
            "intended",
            summary.invalid_utf8, summary.invalid_utf8 == 1 ? " is" : "s are", escape_text(summary.first_invalid_utf8),
            summary.invalid_utf8 == 1 ? "its" : "their");
    // Nothing is placed into the folder for a run that read no document (a wrong --field, empty
    // files): empty shards and a manifest would look like a complete dataset.
    if (train.documents + val.documents == 0)
        fail(
            "prepare: no documents were read from the input ({} bad lines and {} empty documents skipped: check "
            "--field "
            "and --bad-lines); nothing was written to {}",
            summary.bad_lines, summary.empty_skipped, o.out_dir);

    summary.documents_train = train.documents;
    summary.documents_val = val.documents;
    summary.tokens_train = train.tokens;
    summary.tokens_val = val.tokens;

    nlohmann::json m;
    const bool wide = shard_token_bytes_for(tok.vocab_size()) == 4;
    m["format"] = {{"layout", "llm.c .bin"},
                   {"magic", wide ? kShardMagicU32 : kShardMagic},
                   {"version", wide ? kShardVersionU32 : kShardVersion},
                   {"dtype", wide ? "uint32" : "uint16"},
                   {"header_bytes", 1024}};
    const nlohmann::json tok_files = tokenizer_file_md5s(o.tokenizer_dir);
    m["tokenizer"] = {{"kind", std::string(choice_name(tok.kind))},
                      {"dir", o.tokenizer_dir},
                      {"vocab_size", tok.vocab_size()},
                      {"eot", tok.eot},
                      {"eot_text", tok.eot_text},
                      {"md5", tok_files},
                      {"allow_special", o.allow_special}};
    m["separator"] = o.separator;
    m["split"] = {{"rule", "md5(utf8(first 1024 code points))[:8] as int mod 1000 < train_buckets"},
                  {"val_ratio", o.val_ratio},
                  {"train_buckets", train_buckets}};
    m["documents"] = {{"train", train.documents},
                      {"val", val.documents},
                      {"total", train.documents + val.documents},
                      {"bad_lines_skipped", summary.bad_lines},
                      {"empty_skipped", summary.empty_skipped},
                      {"invalid_utf8", summary.invalid_utf8}};
    m["tokens"] = {{"train", train.tokens}, {"val", val.tokens}, {"total", train.tokens + val.tokens}};
    m["bytes"] = summary.bytes;
    nlohmann::json sources = nlohmann::json::array();
    for (size_t s = 0; s < reader.sources.size(); s++) {
        const auto& src = reader.sources[s];
        sources.push_back({{"path", src.path},
                           {"file_bytes", src.file_bytes},
                           {"bytes", src.bytes},
                           {"documents", src.documents - bad_per_source[s] - empty_per_source[s]},
                           {"bad_lines", bad_per_source[s]},
                           {"empty_skipped", empty_per_source[s]},
                           {"md5", src.md5}});
    }
    m["sources"] = sources;
    nlohmann::json shards = nlohmann::json::array();
    for (SplitOutput* s : {&train, &val})
        for (const auto& sh : s->shards) {
            shards.push_back({{"file", fs::path(sh.path).filename().string()},
                              {"split", s->name},
                              {"tokens", sh.tokens},
                              {"md5", md5_file(sh.temp)}});
            summary.shards.push_back(sh.path);
        }
    m["shards"] = shards;
    m["created_by"] = "skew prepare 0.1.0";
    m["seconds"] = summary.seconds;

    summary.manifest = (fs::path(o.out_dir) / "manifest.json").string();
    const std::string manifest_temp = shard_temp_path(summary.manifest);
    {
        std::ofstream f(manifest_temp, std::ios::binary);
        f << json_text(m) << "\n";
        if (!f) {
            f.close();
            std::remove(manifest_temp.c_str());
            fail("prepare: cannot write {}", manifest_temp);
        }
    }

    check_stop();  // the last point at which nothing is in place yet
    // Put everything in place: the old manifest goes first (the folder is not a dataset until the
    // new one lands), then the shards, then shards of an earlier run that this one did not write
    // (they would join a split), then the manifest.
    fs::remove(summary.manifest, ec);
    std::set<std::string> written;
    for (SplitOutput* s : {&train, &val}) {
        for (const auto& sh : s->shards) {
            fs::rename(sh.temp, sh.path, ec);
            if (ec) fail("prepare: cannot rename {} to {}: {}", sh.temp, sh.path, ec.message());
            written.insert(fs::path(sh.path).filename().string());
        }
        s->placed = true;
    }
    static const std::regex ours("(train|val)_[0-9]{6}\\.bin");
    for (auto it = fs::directory_iterator(o.out_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        std::string file = it->path().filename().string();
        std::error_code rm;
        if (std::regex_match(file, ours) && !written.count(file)) fs::remove(it->path(), rm);
    }
    fs::rename(manifest_temp, summary.manifest, ec);
    if (ec) {
        std::remove(manifest_temp.c_str());
        fail("prepare: cannot rename {} to {}: {}", manifest_temp, summary.manifest, ec.message());
    }
    out_dir.done = true;
    return summary;
}

PrepareSummary prepare_run(const PrepareOptions& o) {
    try {
        return prepare_impl(o);
    } catch (const fs::filesystem_error& e) {  // a std::filesystem call without an error_code: name the path
        fail("prepare: {}: {}", e.path1().string(), e.code().message());
    }
}

}  // namespace skew::data
