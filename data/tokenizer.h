// GPT-2 byte-level BPE tokenizer (docs/design.md "Data"): GPT-2's pre-tokenization regex through PCRE2
// with Unicode properties, the byte-to-unicode map, merge ranks and a per-thread word cache.
// Token ids equal OpenAI's (tiktoken "gpt2", the original encoder.py) on valid UTF-8.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace skew::data {

inline constexpr int32_t kEndOfText = 50256;  // GPT-2's <|endoftext|>
inline constexpr std::string_view kEndOfTextText = "<|endoftext|>";

struct TokenizerRegex;  // compiled PCRE2 pattern (tokenizer.cpp)

/// Open-addressing hash table from uint64 keys to uint64 values: linear probing, power-of-two
/// capacity, key ~0 marks an empty slot. Flat so a lookup is one or two cache lines.
struct FlatTable64 {
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    std::vector<uint64_t> keys;    // (capacity)
    std::vector<uint64_t> values;  // (capacity)
    uint64_t mask = 0;             // capacity - 1
    uint64_t size = 0;             // keys held; the table doubles before it is half full
};

/// 64-bit hash of a byte string (never FlatTable64::kEmpty).
uint64_t tokenizer_hash_bytes(std::string_view bytes);

/// A loaded GPT-2 vocabulary. Immutable after tokenizer_load, so one Tokenizer is shared by all
/// threads; each thread brings its own TokenizerWorkspace to tokenizer_encode.
struct Tokenizer {
    std::vector<std::string> token_bytes;            // (vocab_size) raw bytes of each token id
    int32_t byte_token[256] = {};                    // token id of each single byte
    FlatTable64 merges;                              // (left id << 32 | right id) -> (rank << 32 | merged id)
    FlatTable64 whole;                               // hash of token bytes -> id (a piece that is one token, as tiktoken)
    int32_t eot = kEndOfText;                        // id of <|endoftext|>, -1 when the vocab lacks it
    std::shared_ptr<TokenizerRegex> regex;           // GPT-2's pre-tokenization pattern, JIT-compiled
    std::string source;                              // the files it was loaded from, for messages

    int32_t vocab_size() const { return static_cast<int32_t>(token_bytes.size()); }
};

/// Per-thread scratch for tokenizer_encode: PCRE2 match data, a JIT stack and the word cache
/// (piece bytes -> token ids). The cache is cleared when it holds more than max_cache_entries.
struct TokenizerWorkspace {
    TokenizerWorkspace();
    ~TokenizerWorkspace();
    TokenizerWorkspace(const TokenizerWorkspace&) = delete;
    TokenizerWorkspace& operator=(const TokenizerWorkspace&) = delete;

    struct Impl;
    std::unique_ptr<Impl> impl;
    size_t max_cache_entries = 1 << 18;  // emptied when it holds this many words (~60 bytes each, ~16 MB)
};

/// Load a GPT-2 vocabulary from dir: encoder.json + vocab.bpe (OpenAI's files) or vocab.json +
/// merges.txt (HuggingFace's). Throws skew::Error naming the file on a missing or malformed file.
Tokenizer tokenizer_load(const std::string& dir);

/// Load from explicit files (a JSON token -> id map and a merges list, first line "#version" optional).
Tokenizer tokenizer_load_files(const std::string& vocab_json_path, const std::string& merges_path);

/// Encode bytes to token ids, appending to out. Text is split by GPT-2's regex (UTF mode, Unicode
/// properties); each piece is byte-pair merged by rank. Invalid UTF-8 is never an error: each
/// maximal run of bytes the regex cannot read becomes a piece of its own, encoded through the byte
/// tokens, so tokenizer_decode(tokenizer_encode(x)) == x for every byte string x.
/// With allow_special, the literal "<|endoftext|>" becomes id 50256; otherwise it is ordinary text.
void tokenizer_encode(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out,
                      TokenizerWorkspace& ws, bool allow_special = false);

/// Convenience form with a temporary workspace (no cache reuse across calls).
std::vector<int32_t> tokenizer_encode(const Tokenizer& tok, std::string_view text, bool allow_special = false);

/// Merge-table lookups made by this thread's encodes so far (a work counter: the tests bound the
/// BPE's work by it, O(n) lookups for an n-byte piece, instead of timing it).
uint64_t tokenizer_merge_lookups();

/// Byte-pair merge one pre-tokenized piece (raw bytes) into ids, appending to out. Linear-ish:
/// short pieces use the rank scan, long ones a heap over a linked list (O(n log n)).
void tokenizer_bpe(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out);

/// Split text into GPT-2 pre-tokenization pieces (views into text), invalid UTF-8 runs included.
std::vector<std::string_view> tokenizer_pieces(const Tokenizer& tok, std::string_view text, TokenizerWorkspace& ws);

/// Decode ids to bytes. Throws skew::Error on an id outside [0, vocab_size).
std::string tokenizer_decode(const Tokenizer& tok, std::span<const int32_t> ids);

/// GPT-2's byte-to-unicode map: the printable code point that stands for each byte in the vocab files.
const std::vector<uint32_t>& gpt2_byte_to_unicode();

}  // namespace skew::data
