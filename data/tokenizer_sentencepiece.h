// SentencePiece models (tokenizer.model: Llama 2, Mistral, Mixtral) through Debian's libsentencepiece
// (docs/data.md "The tokenizers"): loading, encoding and decoding; the model's own normalizer, byte
// fallback and pieces decide the ids.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace skew::data {

/// Load tokenizer.model. Throws skew::Error "tokenizer: PATH: ..." with libsentencepiece's reason.
std::shared_ptr<const SentencePieceModel> sentencepiece_load(const std::string& path);

/// Append the ids of text (no BOS or EOS: those are the caller's, as the model's ids say). Thread-safe.
void sentencepiece_encode(const SentencePieceModel& model, std::string_view text, std::vector<int32_t>& out);

/// The text of ids (control pieces such as <s> and </s> give nothing, as libsentencepiece decodes).
std::string sentencepiece_decode(const SentencePieceModel& model, std::span<const int32_t> ids);

}  // namespace skew::data
