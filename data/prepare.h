// `skew prepare`: text corpus -> token shards (docs/design.md "Data"). Streams documents in bounded
// chunks, tokenizes each chunk on all cores, routes documents by the MD5 split and writes llm.c
// .bin shards plus manifest.json, every file through a hidden temporary name, all renamed into place
// together at the end (an interrupted run leaves an earlier dataset whole).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace skew::data {

struct PrepareOptions {
    std::vector<std::string> inputs;  // files, directories, globs (expand_inputs)
    std::string out_dir;              // shards + manifest.json go here
    std::string tokenizer_dir = "data/tokenizer";
    double val_ratio = 0.05;               // share of hash buckets that go to val
    std::string separator = "eot";         // eot: the end-of-text token before every document (llm.c); none: the paper
    bool skip_bad_lines = true;            // a bad .jsonl line is skipped (and counted) or fatal
    std::string field = "text";            // the .jsonl field holding the document
    bool allow_special = false;            // special tokens' text inside a document becomes their ids
    int threads = 0;                       // tokenizer threads; 0 = all cores
    int64_t shard_tokens = 100'000'000;    // tokens per shard file (llm.c's default size)
    int64_t chunk_bytes = 8ll << 20;       // text per chunk; two chunks are in memory at once
    bool progress = true;                  // progress bar on stderr when it is a terminal (output_is_terminal)
    std::function<bool()> stop_requested;  // polled between documents: true ends the run as a failure
                                           // (Ctrl-C); empty: never
};

struct PrepareSummary {
    int64_t documents_train = 0, documents_val = 0;
    int64_t tokens_train = 0, tokens_val = 0;
    int64_t bytes = 0;               // document bytes tokenized
    int64_t bad_lines = 0;           // .jsonl lines skipped
    int64_t empty_skipped = 0;       // empty documents (a 0-byte .txt, a .jsonl text ""), skipped
    int64_t invalid_utf8 = 0;        // documents holding bytes that are not UTF-8 (tokenized as bytes)
    std::string first_invalid_utf8;  // the first such document's file (file:line for .jsonl)
    std::vector<std::string> shards;
    std::string manifest;  // path of manifest.json
    double seconds = 0;
};

/// Run the whole preparation. Holds an exclusive lock on out_dir (flock of out_dir/.skew-prepare.lock,
/// released and removed when the run ends) so two runs never share a folder. Throws skew::Error
/// (file and line named) on unreadable input, a bad line when skip_bad_lines is false, an unknown
/// separator, an unwritable output directory, another prepare writing out_dir, no document read,
/// or a filesystem error under an input (a symbolic link loop, a permission) -- the path named, or
/// "prepare: interrupted ..." when options.stop_requested says so before the files are put in place. A
/// run that fails places nothing into out_dir (an earlier dataset there stays whole; its own
/// temporaries and lock file are removed, and out_dir too when this run created it).
PrepareSummary prepare_run(const PrepareOptions& options);

/// Lowercase hex MD5 of a file's bytes, read in blocks.
std::string md5_file(const std::string& path);

}  // namespace skew::data
