// Corpus readers (docs/design.md "Data"): .txt (a file is one document) and .jsonl (one JSON object per
// line, field "text"), plain or gzip-compressed (.gz, through zlib); inputs may be files,
// directories (searched recursively) or glob patterns. Documents stream; nothing is held whole.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace skew::data {

/// One record as read. For .jsonl, raw holds the JSON line and document_parse extracts the text, so
/// parsing can run on worker threads; for .txt, raw is already the text.
struct DocumentRecord {
    std::string raw;
    bool is_json = false;
    int32_t source = 0;  // index into DocumentReader::sources
    int64_t line = 0;    // 1-based line number in a .jsonl source; 0 for .txt
};

/// Per-source statistics, filled in while reading (the manifest's "sources").
struct SourceInfo {
    std::string path;
    int64_t bytes = 0;       // bytes read after decompression
    int64_t file_bytes = 0;  // size on disk
    int64_t documents = 0;   // records read (bad .jsonl lines included until checked)
    std::string md5;         // MD5 of the decompressed content, set when the source is finished
};

struct DocumentReaderState;  // open file, line buffer, hash context (reader.cpp)

/// Streams records from a list of input files in order.
struct DocumentReader {
    std::vector<SourceInfo> sources;
    int64_t total_file_bytes = 0;     // sum of file sizes on disk, for progress/ETA
    int64_t consumed_file_bytes = 0;  // bytes of those files consumed so far (compressed for .gz)
    std::unique_ptr<DocumentReaderState> state;
    DocumentReader();
    ~DocumentReader();
    DocumentReader(DocumentReader&&) noexcept;
    DocumentReader& operator=(DocumentReader&&) noexcept;
};

/// Expand inputs into a sorted, de-duplicated list of readable files: a file is taken as is, a
/// directory contributes every *.txt, *.jsonl, *.txt.gz, *.jsonl.gz below it, anything else is a
/// glob pattern. Throws skew::Error when an input matches nothing or a file has another extension.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

/// Open a reader over expanded input files (see expand_inputs).
DocumentReader document_reader_open(const std::vector<std::string>& files);

/// Read the next record into rec; false at the end of the last source. Empty .jsonl lines are
/// skipped. Throws skew::Error naming the file on an I/O or decompression failure.
bool document_reader_next(DocumentReader& reader, DocumentRecord& rec);

/// The document text of a record: the raw text for .txt; for .jsonl the string field `field` of
/// the JSON object. On a bad line returns false and sets error (message without file/line).
bool document_parse(const DocumentRecord& rec, const std::string& field, std::string& text, std::string& error);

/// Read every document of the inputs (tests and small corpora). Bad .jsonl lines are fatal unless
/// skip_bad_lines; the message names file and line.
std::vector<std::string> read_documents(const std::vector<std::string>& inputs, bool skip_bad_lines = false,
                                        const std::string& field = "text");

}  // namespace skew::data
