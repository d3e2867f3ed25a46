// Unicode normalization (NFC, NFD, NFKC, NFKD) of UTF-8 text through ICU's Normalizer2, for the
// normalizers of Hugging Face tokenizer.json files (docs/data.md "The tokenizers"). PCRE2 does not
// normalize, so a tokenizer that declares NFC (Qwen) normalizes here before pre-tokenization.
#pragma once
#include <string>
#include <string_view>

#include "data/tokenizer.h"

namespace skew::data {

/// Append the normalization `form` of text to out. Each maximal run of valid UTF-8 is normalized on
/// its own; bytes that are not UTF-8 are copied unchanged (they bound the runs, so decoding a
/// tokenization gives them back). Throws skew::Error only when ICU cannot load its data.
void unicode_normalize(NormalizationForm form, std::string_view text, std::string& out);

}  // namespace skew::data
