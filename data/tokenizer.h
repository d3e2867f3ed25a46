// Tokenizers (docs/data.md "The tokenizers"): one Tokenizer type for four kinds of vocabulary, chosen by
// the files of a folder: a Hugging Face tokenizer.json (a byte-level BPE, or a SentencePiece-style BPE
// with byte_fallback: its normalizer, pre-tokenizer, merges and added tokens), a SentencePiece
// tokenizer.model (through libsentencepiece), or GPT-2's encoder.json + vocab.bpe (the default; ids
// equal OpenAI's tiktoken "gpt2" on valid UTF-8).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/choice_names.h"

namespace skew::data {

inline constexpr int32_t kEndOfText = 50256;  // GPT-2's <|endoftext|>
inline constexpr std::string_view kEndOfTextText = "<|endoftext|>";

/// Which files a Tokenizer was read from, and so how it encodes.
enum TokenizerKind : int {
    TOKENIZER_GPT2_BPE = 0,       // encoder.json + vocab.bpe (or vocab.json + merges.txt)
    TOKENIZER_HF_BYTE_LEVEL_BPE,  // tokenizer.json with model.type BPE and a ByteLevel pre-tokenizer
    TOKENIZER_SENTENCEPIECE,      // tokenizer.model (libsentencepiece)
    TOKENIZER_HF_SENTENCEPIECE_BPE,  // tokenizer.json with model.type BPE over characters and byte_fallback (Llama 2, Mistral, Mixtral)
};

/// Unicode normalization forms a tokenizer.json normalizer may apply (ICU's, on valid UTF-8 runs).
enum NormalizationForm : int { NORMALIZE_NFC = 0, NORMALIZE_NFD, NORMALIZE_NFKC, NORMALIZE_NFKD };

/// One normalizer of a tokenizer.json, applied in order to each stretch of text between added tokens:
/// a Unicode form; Prepend (`text` before a non-empty stretch); Replace (every `text` by `replacement`,
/// left to right, a String pattern).
struct NormalizerStep {
    enum Kind : int { UNICODE_FORM = 0, PREPEND, REPLACE };
    Kind kind = UNICODE_FORM;
    NormalizationForm form = NORMALIZE_NFC;  // UNICODE_FORM
    std::string text;                        // PREPEND: what is prepended; REPLACE: what is replaced
    std::string replacement;                 // REPLACE
};

/// Where a Metaspace pre-tokenizer puts its replacement character before a piece (Hugging Face's
/// PrependScheme): always, only before the text's first piece, never.
enum MetaspacePrepend : int { METASPACE_ALWAYS = 0, METASPACE_FIRST, METASPACE_NEVER };

struct TokenizerRegex;      // compiled PCRE2 pattern (tokenizer.cpp)
struct SentencePieceModel;  // a loaded libsentencepiece processor (tokenizer_sentencepiece.cpp)

/// A token matched in the text before pre-tokenization (tokenizer.json's added_tokens; GPT-2's
/// <|endoftext|>; a SentencePiece model's control symbols). Special ones match only when allowed.
struct AddedToken {
    std::string content;  // the token's text, as bytes
    std::string match;    // what is searched for: content, or its normalized form when normalized
    int32_t id = -1;
    bool special = false;                 // matched only with allow_special
    bool normalized = false;              // matched in the normalized text (else in the raw text, first)
    bool lstrip = false, rstrip = false;  // the match takes the white space on its left / right
    bool single_word = false;             // not matched inside a word (a \w character on either side)
};

/// How a Split pre-tokenizer treats the pattern's matches (Hugging Face's SplitDelimiterBehavior).
enum SplitBehavior : int {
    SPLIT_REMOVED = 0,
    SPLIT_ISOLATED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS
};

/// One step of a pre-tokenizer Sequence. Split: the pieces the pattern makes under `behavior`
/// (`invert` swaps matches and the text between them). ByteLevel: a space before a piece that does
/// not start with one (add_prefix_space), then GPT-2's pattern (use_regex; `regex` null without it).
/// Metaspace: every space replaced by `replacement`, which is put before the piece as `prepend` says
/// where the piece does not start with it, then (split) a piece before each replacement character.
struct PreTokenizerStep {
    bool byte_level = false;
    bool add_prefix_space = false;
    bool metaspace = false;
    std::string replacement;  // Metaspace: "\u2581"
    MetaspacePrepend prepend = METASPACE_ALWAYS;
    std::shared_ptr<TokenizerRegex> regex;
    SplitBehavior behavior = SPLIT_ISOLATED;
    bool invert = false;
};

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

/// A loaded vocabulary. Immutable after tokenizer_load, so one Tokenizer is shared by all threads;
/// each thread brings its own TokenizerWorkspace to tokenizer_encode.
struct Tokenizer {
    TokenizerKind kind = TOKENIZER_GPT2_BPE;
    std::vector<std::string> token_bytes;  // (vocab_size) raw bytes of each token id, as decoded (BPE kinds)
    std::vector<std::string>
        pieces;  // (vocab_size) SentencePiece-style: each id's vocabulary string ("\u2581the"), what merges and lookups see
    int32_t byte_token[256] = {};   // token id of each single byte (BPE kinds; SentencePiece-style: <0xNN>)
    FlatTable64 merges;             // (left id << 32 | right id) -> (rank << 32 | merged id)
    FlatTable64 whole;              // hash of token bytes -> id: a piece that is one token is it
    bool whole_piece_first = true;  // use `whole` before merging (GPT-2 as tiktoken; tokenizer.json's ignore_merges)
    int32_t eot = kEndOfText;       // the end-of-text token `skew prepare` puts between documents, -1 if none
    std::string eot_text = std::string(kEndOfTextText);  // its text ("" when eot is -1)
    int32_t bos = -1;                      // SentencePiece (either kind): the beginning-of-sentence id <s> (-1: none)
    std::vector<AddedToken> added_tokens;  // matched before pre-tokenization, leftmost longest
    std::vector<NormalizerStep> normalizers;  // applied in order to the text between added tokens
    int32_t decode_strip_spaces = 0;  // SentencePiece-style: leading spaces the decoder strips (Strip, Metaspace)
    std::vector<PreTokenizerStep> pre_tokenizer;              // applied in order; GPT-2: one ByteLevel step
    std::shared_ptr<const SentencePieceModel> sentencepiece;  // TOKENIZER_SENTENCEPIECE only
    int32_t size = 0;                                         // ids are [0, size)
    std::string source;                                       // the files it was loaded from, for messages

    int32_t vocab_size() const { return size; }
};

/// Per-thread scratch for tokenizer_encode: PCRE2 match data, a JIT stack, the word cache
/// (piece bytes -> token ids) and normalization buffers. The cache is cleared when it holds more
/// than max_cache_entries.
struct TokenizerWorkspace {
    TokenizerWorkspace();
    ~TokenizerWorkspace();
    TokenizerWorkspace(const TokenizerWorkspace&) = delete;
    TokenizerWorkspace& operator=(const TokenizerWorkspace&) = delete;

    struct Impl;
    std::unique_ptr<Impl> impl;
    size_t max_cache_entries = 1 << 18;  // emptied when it holds this many words (~60 bytes each, ~16 MB)
};

/// Load the tokenizer of folder dir: tokenizer.json when present, else tokenizer.model, else GPT-2's
/// encoder.json + vocab.bpe (OpenAI's files) or vocab.json + merges.txt (Hugging Face's). Throws
/// skew::Error in one line naming the file (and the JSON field) on a missing or malformed file or an
/// unsupported model, normalizer or pre-tokenizer.
Tokenizer tokenizer_load(const std::string& dir);

/// The file of dir that tokenizer_load reads first ("tokenizer.json", "tokenizer.model",
/// "encoder.json", "vocab.json"), or "" when it holds none of them.
std::string tokenizer_main_file(const std::string& dir);

/// Load GPT-2 from explicit files (a JSON token -> id map and a merges list, first line "#version" optional).
Tokenizer tokenizer_load_files(const std::string& vocab_json_path, const std::string& merges_path);

/// Load a Hugging Face tokenizer.json (tokenizer_json.cpp): model.type BPE with its vocab and merges
/// (strings "a b" or pairs ["a", "b"]), ignore_merges; a normalizer of NFC/NFD/NFKC/NFKD, Prepend
/// and Replace (a String pattern), a Sequence of them or none; added_tokens. A byte-level BPE: a
/// pre-tokenizer of Split (Regex or String pattern, any behavior, invert) and ByteLevel steps holding
/// a ByteLevel, a ByteLevel decoder. A SentencePiece-style BPE (model.byte_fallback true: Llama 2,
/// Mistral, Mixtral): the vocabulary's strings with "\u2581" for a space and the 256 <0xNN> byte
/// pieces, no pre-tokenizer or Metaspace (and Split) steps, a decoder of Replace, ByteFallback, Fuse
/// and Strip (or Metaspace); each character not in the vocabulary is its UTF-8 bytes' pieces, as
/// Hugging Face's BPE with byte_fallback. The end-of-text token is the first special added token of
/// kEndOfTextNames; <s> is `bos`. Throws skew::Error "tokenizer: PATH: FIELD: problem" on anything else.
Tokenizer tokenizer_load_json(const std::string& path);

/// Parse tokenizer.json text (the loader without the file read; `source` names it in errors).
Tokenizer tokenizer_parse_json(std::string_view text, const std::string& source);

/// Load a SentencePiece tokenizer.model through libsentencepiece (tokenizer_sentencepiece.cpp):
/// eot is the model's eos piece (</s>), bos its bos piece, the control pieces its special tokens.
/// Throws skew::Error naming the file and libsentencepiece's reason when it does not load.
Tokenizer tokenizer_load_sentencepiece(const std::string& path);

/// Special-token texts taken as the end of text, first found wins: <|endoftext|> (GPT-2, Qwen,
/// GPT-NeoX), <|end_of_text|> (Llama 3), </s>, <|end▁of▁sentence|> (DeepSeek), <eos>, <EOT>.
extern const std::vector<std::string_view> kEndOfTextNames;

/// Encode bytes to token ids, appending to out. Added tokens are matched first (the special ones
/// only with allow_special; GPT-2's "<|endoftext|>" is one), then the text between them is
/// normalized, pre-tokenized and each piece byte-pair merged by rank (SentencePiece: encoded by
/// libsentencepiece). Invalid UTF-8 is never an error: for the byte-level kinds each maximal run of
/// bytes that is not UTF-8 becomes a piece of its own, encoded through the byte tokens, and a
/// SentencePiece-style tokenizer.json takes each such byte as its <0xNN> piece, so
/// tokenizer_decode(tokenizer_encode(x)) == x for every byte string x (normalized, when the
/// tokenizer normalizes). SentencePiece reads such bytes as U+FFFD.
void tokenizer_encode(const Tokenizer& tok, std::string_view text, std::vector<int32_t>& out, TokenizerWorkspace& ws,
                      bool allow_special = false);

/// Convenience form with a temporary workspace (no cache reuse across calls).
std::vector<int32_t> tokenizer_encode(const Tokenizer& tok, std::string_view text, bool allow_special = false);

/// Merge-table lookups made by this thread's encodes so far (a work counter: the tests bound the
/// BPE's work by it, O(n) lookups for an n-byte piece, instead of timing it).
uint64_t tokenizer_merge_lookups();

/// Byte-pair merge one pre-tokenized piece (raw bytes; SentencePiece-style: its characters, with
/// byte fallback) into ids, appending to out. Linear-ish: short pieces use the rank scan, long ones a
/// heap over a linked list (O(n log n)).
void tokenizer_bpe(const Tokenizer& tok, std::string_view piece, std::vector<int32_t>& out);

/// Split text (no added tokens, no normalization) into pre-tokenization pieces, invalid UTF-8 runs
/// included. Pieces are copies: a ByteLevel step with add_prefix_space makes text that is not in `text`.
std::vector<std::string> tokenizer_pieces(const Tokenizer& tok, std::string_view text, TokenizerWorkspace& ws);

/// Decode ids to bytes (BPE kinds: the tokens' bytes, added tokens their text; a SentencePiece-style
/// tokenizer.json also as its decoder says: "\u2581" as a space, <0xNN> as its byte, decode_strip_spaces
/// leading spaces stripped; SentencePiece: libsentencepiece's decoding, control pieces give nothing).
/// Throws skew::Error on an id outside [0, vocab_size).
std::string tokenizer_decode(const Tokenizer& tok, std::span<const int32_t> ids);

/// GPT-2's byte-to-unicode map: the printable code point that stands for each byte in the vocab files.
const std::vector<uint32_t>& gpt2_byte_to_unicode();

}  // namespace skew::data

namespace skew {

/// The name of a normalization form as tokenizer.json writes it ("NFC", ...).
template <>
struct ChoiceNames<data::NormalizationForm> {
    static constexpr std::array<std::pair<data::NormalizationForm, std::string_view>, 4> items{
        {{data::NORMALIZE_NFC, "NFC"},
         {data::NORMALIZE_NFD, "NFD"},
         {data::NORMALIZE_NFKC, "NFKC"},
         {data::NORMALIZE_NFKD, "NFKD"}}};
};

/// A Metaspace prepend_scheme as tokenizer.json writes it.
template <>
struct ChoiceNames<data::MetaspacePrepend> {
    static constexpr std::array<std::pair<data::MetaspacePrepend, std::string_view>, 3> items{
        {{data::METASPACE_ALWAYS, "always"}, {data::METASPACE_FIRST, "first"}, {data::METASPACE_NEVER, "never"}}};
};
/// A Split pre-tokenizer's behavior as tokenizer.json writes it.
template <>
struct ChoiceNames<data::SplitBehavior> {
    static constexpr std::array<std::pair<data::SplitBehavior, std::string_view>, 5> items{
        {{data::SPLIT_REMOVED, "Removed"},
         {data::SPLIT_ISOLATED, "Isolated"},
         {data::SPLIT_MERGED_WITH_PREVIOUS, "MergedWithPrevious"},
         {data::SPLIT_MERGED_WITH_NEXT, "MergedWithNext"},
         {data::SPLIT_CONTIGUOUS, "Contiguous"}}};
};
/// The name manifests record for a tokenizer kind.
template <>
struct ChoiceNames<data::TokenizerKind> {
    static constexpr std::array<std::pair<data::TokenizerKind, std::string_view>, 4> items{
        {{data::TOKENIZER_GPT2_BPE, "gpt2-bpe"},
         {data::TOKENIZER_HF_BYTE_LEVEL_BPE, "hf-byte-level-bpe"},
         {data::TOKENIZER_SENTENCEPIECE, "sentencepiece"},
         {data::TOKENIZER_HF_SENTENCEPIECE_BPE, "hf-sentencepiece-bpe"}}};
};

}  // namespace skew
