// Corpus readers: gzip-or-plain files through zlib's gzread (it passes plain files through), .txt
// as one document per file, .jsonl as one record per line, directories and globs expanded in order.
#include "data/reader.h"

#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <glob.h>
#include <zlib.h>

#include "data/split.h"
#include "engine/error.h"
#include "engine/json_strict.h"

namespace skew::data {
namespace fs = std::filesystem;

static bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
static bool is_jsonl(const std::string& p) { return ends_with(p, ".jsonl") || ends_with(p, ".jsonl.gz"); }
static bool is_txt(const std::string& p) { return ends_with(p, ".txt") || ends_with(p, ".txt.gz"); }

struct DocumentReaderState {
    std::vector<std::string> files;
    size_t next_file = 0;
    gzFile gz = nullptr;
    bool jsonl = false;
    int32_t source = -1;
    int64_t line = 0;
    std::string buffer;  // bytes read but not yet returned (jsonl)
    size_t buffer_pos = 0;
    bool eof = false;
    int64_t file_offset_done = 0;  // consumed_file_bytes before the current file
    EVP_MD_CTX* md5 = nullptr;
    ~DocumentReaderState() {
        if (gz) gzclose(gz);
        if (md5) EVP_MD_CTX_free(md5);
    }
};

DocumentReader::DocumentReader() = default;
DocumentReader::~DocumentReader() = default;
DocumentReader::DocumentReader(DocumentReader&&) noexcept = default;
DocumentReader& DocumentReader::operator=(DocumentReader&&) noexcept = default;

// A filesystem error on `path` as a skew::Error naming the path and what went wrong; a symbolic
// link loop (ELOOP) is called one, since its message alone ("Too many levels of symbolic links")
// does not say which link to fix.
[[noreturn]] static void fail_path(const std::string& path, const std::error_code& ec) {
    if (ec == std::errc::too_many_symbolic_link_levels)
        fail("data: {}: a symbolic link loop ({}); remove or fix the link, or leave it out of --input", path,
             ec.message());
    fail("data: cannot read {}: {}", path, ec.message());
}

// Every *.txt, *.jsonl (optionally .gz) below dir, following directory links; a link leading back
// to a folder already on the walk's path is a loop and an error naming the link.
static std::vector<std::string> expand_directory(const std::string& dir) {
    std::vector<std::string> found;
    std::error_code ec;
    auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
    if (ec) fail_path(dir, ec);
    for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) break;
        const fs::path& path = it->path();
        const fs::file_status st = it->status(ec);
        if (ec && st.type() != fs::file_type::not_found) fail_path(path.string(), ec);  // a dangling link is skipped
        ec.clear();
        if (fs::is_directory(st) && it->is_symlink(ec)) {
            // A link to a folder that holds it (or is it) would be walked until the path is too long.
            const fs::path target = fs::canonical(path, ec);
            if (ec) fail_path(path.string(), ec);
            const fs::path parent = fs::canonical(path.parent_path(), ec);
            if (ec) fail_path(path.parent_path().string(), ec);
            auto [t, p] = std::mismatch(target.begin(), target.end(), parent.begin(), parent.end());
            if (t == target.end())
                fail(
                    "data: {}: a symbolic link loop (it leads back to {}, which holds it); remove the link or leave it "
                    "out "
                    "of --input",
                    path.string(), target.string());
            continue;
        }
        std::string p = path.string();
        if (fs::is_regular_file(st) && (is_jsonl(p) || is_txt(p))) found.push_back(p);
    }
    if (ec) fail_path(dir, ec);  // listing a folder below dir failed (the iterator has ended: dir is all we know)
    std::sort(found.begin(), found.end());
    return found;
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
    std::vector<std::string> files;
    for (const auto& input : inputs) {
        std::error_code ec;
        size_t before = files.size();
        const fs::file_status st = fs::status(input, ec);
        if (ec && st.type() != fs::file_type::not_found) fail_path(input, ec);  // not found: maybe a glob
        if (fs::is_directory(st)) {
            auto found = expand_directory(input);
            files.insert(files.end(), found.begin(), found.end());
        } else if (fs::is_regular_file(st)) {
            if (!is_jsonl(input) && !is_txt(input))
                fail("data: {} is neither .txt nor .jsonl (optionally .gz); rename it or convert it", input);
            files.push_back(input);
        } else {
            glob_t g{};
            int rc = glob(input.c_str(), 0, nullptr, &g);
            if (rc == 0) {
                for (size_t i = 0; i < g.gl_pathc; i++) {
                    std::string p = g.gl_pathv[i];
                    const fs::file_status pst = fs::status(p, ec);
                    if (ec && pst.type() != fs::file_type::not_found) fail_path(p, ec);
                    if (fs::is_directory(pst)) {
                        auto sub = expand_directory(p);
                        files.insert(files.end(), sub.begin(), sub.end());
                    } else if (is_jsonl(p) || is_txt(p)) {
                        files.push_back(p);
                    }
                }
            }
            globfree(&g);
        }
        if (files.size() == before) fail("data: input {} matches no .txt or .jsonl file", input);
    }
    // De-duplicate, keeping the first occurrence (order is the order of the inputs).
    std::vector<std::string> unique;
    for (auto& f : files)
        if (std::find(unique.begin(), unique.end(), f) == unique.end()) unique.push_back(f);
    return unique;
}

DocumentReader document_reader_open(const std::vector<std::string>& files) {
    DocumentReader r;
    r.state = std::make_unique<DocumentReaderState>();
    r.state->files = files;
    for (const auto& f : files) {
        std::error_code ec;
        auto size = fs::file_size(f, ec);
        if (ec) fail_path(f, ec);
        SourceInfo info;
        info.path = f;
        info.file_bytes = int64_t(size);
        r.total_file_bytes += int64_t(size);
        r.sources.push_back(info);
    }
    return r;
}

static void hash_update(DocumentReaderState& s, const char* data, size_t n) {
    if (n) EVP_DigestUpdate(s.md5, data, n);
}

static void finish_source(DocumentReader& r) {
    auto& s = *r.state;
    if (s.gz) {
        gzclose(s.gz);
        s.gz = nullptr;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(s.md5, digest, &len);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; i++) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 15]);
    }
    r.sources[s.source].md5 = out;
    s.file_offset_done += r.sources[s.source].file_bytes;
    r.consumed_file_bytes = s.file_offset_done;
}

// Read up to n more bytes from the open file into s.buffer; returns bytes read (0 at end).
static size_t fill(DocumentReader& r, size_t n) {
    auto& s = *r.state;
    size_t old = s.buffer.size();
    s.buffer.resize(old + n);
    int got = gzread(s.gz, s.buffer.data() + old, unsigned(n));
    if (got < 0) {
        int err = 0;
        const char* msg = gzerror(s.gz, &err);
        fail("data: cannot read {}: {}", r.sources[s.source].path, msg ? msg : "zlib error");
    }
    const std::string& path = r.sources[s.source].path;
    if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
        // zlib reads a non-gzip file "transparently" and reports a cut-off stream only as an error
        // state at the end: refuse both for a .gz input instead of tokenizing raw or partial bytes.
        if (got > 0 && gzdirect(s.gz))
            fail("data: {} is not a gzip file (no gzip header); rename or recompress it", path);
        int err = Z_OK;
        gzerror(s.gz, &err);
        if (got == 0 && err != Z_OK)
            fail("data: {} is a corrupt or truncated gzip stream ({})", path, gzerror(s.gz, &err));
    }
    s.buffer.resize(old + size_t(got));
    hash_update(s, s.buffer.data() + old, size_t(got));
    r.sources[s.source].bytes += got;
    r.consumed_file_bytes = s.file_offset_done + std::min<int64_t>(gzoffset(s.gz), r.sources[s.source].file_bytes);
    if (got == 0) s.eof = true;
    return size_t(got);
}

bool document_reader_next(DocumentReader& r, DocumentRecord& rec) {
    auto& s = *r.state;
    while (true) {
        if (!s.gz) {
            if (s.next_file >= s.files.size()) return false;
            s.source = int32_t(s.next_file++);
            const std::string& path = s.files[s.source];
            s.gz = gzopen(path.c_str(), "rb");
            if (!s.gz) fail("data: cannot open {}", path);
            gzbuffer(s.gz, 1 << 20);
            s.jsonl = is_jsonl(path);
            s.line = 0;
            s.buffer.clear();
            s.buffer_pos = 0;
            s.eof = false;
            if (!s.md5) s.md5 = EVP_MD_CTX_new();
            EVP_DigestInit_ex(s.md5, EVP_md5(), nullptr);
        }
        if (!s.jsonl) {  // .txt: the whole file is one document
            while (fill(r, 1 << 20) > 0) {}
            rec.raw = std::move(s.buffer);
            s.buffer.clear();
            rec.is_json = false;
            rec.source = s.source;
            rec.line = 0;
            r.sources[s.source].documents++;
            finish_source(r);
            return true;
        }
        // .jsonl: next line
        while (true) {
            size_t nl = s.buffer.find('\n', s.buffer_pos);
            if (nl == std::string::npos && !s.eof) {
                s.buffer.erase(0, s.buffer_pos);
                s.buffer_pos = 0;
                fill(r, 1 << 20);
                continue;
            }
            size_t end = nl == std::string::npos ? s.buffer.size() : nl;
            if (end == s.buffer_pos && nl == std::string::npos) break;  // end of file
            s.line++;
            std::string_view line(s.buffer.data() + s.buffer_pos, end - s.buffer_pos);
            s.buffer_pos = nl == std::string::npos ? s.buffer.size() : nl + 1;
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line
            rec.raw.assign(line);
            rec.is_json = true;
            rec.source = s.source;
            rec.line = s.line;
            r.sources[s.source].documents++;
            return true;
        }
        finish_source(r);
    }
}

bool document_parse(const DocumentRecord& rec, const std::string& field, std::string& text, std::string& error) {
    if (!rec.is_json) {
        text = rec.raw;
        return true;
    }
    nlohmann::json j;
    std::string json_error;
    if (!json_try_parse_strict(rec.raw, j, json_error)) {
        error = json_error.starts_with("duplicate key") ? json_error : "not valid JSON";
        return false;
    }
    if (!j.is_object()) {
        error = "not a JSON object";
        return false;
    }
    auto it = j.find(field);
    if (it == j.end()) {
        error = "no \"" + field + "\" field";
        return false;
    }
    if (!it->is_string()) {
        error = "field \"" + field + "\" is not a string";
        return false;
    }
    text = it->get<std::string>();
    return true;
}

std::vector<std::string> read_documents(const std::vector<std::string>& inputs, bool skip_bad_lines,
                                        const std::string& field) {
    auto reader = document_reader_open(expand_inputs(inputs));
    std::vector<std::string> docs;
    DocumentRecord rec;
    std::string text, error;
    while (document_reader_next(reader, rec)) {
        if (document_parse(rec, field, text, error)) docs.push_back(text);
        else if (!skip_bad_lines)
            fail("data: {}:{}: {} (skip bad lines with --bad-lines skip)", reader.sources[rec.source].path, rec.line,
                 error);
    }
    return docs;
}

}  // namespace skew::data
