// What the tokenizer loaders share (tokenizer.cpp, tokenizer_json.cpp, tokenizer_sentencepiece.cpp):
// pattern compilation, the byte-level vocabulary alphabet, the merge and whole-token tables.
// Not for other callers: data/tokenizer.h is the interface.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace skew::data {

/// Compile a pre-tokenizer pattern with PCRE2 (UTF, Unicode properties, invalid UTF-8 allowed, JIT
/// where available). `\s` and `\S` are read as Unicode White_Space, as Oniguruma (Hugging Face's
/// regex engine) and Python's regex do. literal: the pattern is plain text. Throws skew::Error
/// "tokenizer: WHAT: PCRE2 cannot compile ... at offset N: reason".
std::shared_ptr<TokenizerRegex> tokenizer_compile_pattern(const std::string& pattern, bool literal,
                                                          const std::string& what);

/// GPT-2's pattern (encoder.py), compiled once and shared: the ByteLevel pre-tokenizer's regex.
std::shared_ptr<TokenizerRegex> tokenizer_gpt2_pattern();

/// Decode a vocabulary string of GPT-2's byte alphabet (gpt2_byte_to_unicode) to raw bytes; false
/// when it holds a character outside the alphabet (out is then unspecified).
bool tokenizer_alphabet_to_bytes(std::string_view s, std::string& out);

/// An empty FlatTable64 sized for `entries` keys.
void tokenizer_table_init(FlatTable64& t, size_t entries);

/// Insert unless the key is present (the first value wins); false when it was present. Grows the table.
bool tokenizer_table_insert(FlatTable64& t, uint64_t key, uint64_t value);

/// Fill tok.whole from the ids whose in_model flag is set (the model's vocabulary, not added tokens):
/// their bytes, or a SentencePiece-style vocabulary's strings (tok.pieces; set tok.kind first).
void tokenizer_build_whole(Tokenizer& tok, const std::vector<char>& in_model);

/// `text` through tok.normalizers in order, into `out` (`scratch`: a buffer the steps alternate with).
void tokenizer_normalize(const Tokenizer& tok, std::string_view text, std::string& out, std::string& scratch);

/// Set each added token's match text (its content, normalized by tok.normalizers when the token is
/// normalized) and order them for matching. Call after tok.normalizers is set.
void tokenizer_prepare_added(Tokenizer& tok);

}  // namespace skew::data
