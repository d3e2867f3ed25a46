// libsentencepiece behind the Tokenizer type (data/tokenizer_sentencepiece.h): the processor is
// loaded once and shared (its Encode and Decode are const and thread-safe).
#include "data/tokenizer_sentencepiece.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "data/tokenizer_build.h"
#include "engine/error.h"

namespace skew::data {

struct SentencePieceModel {
    sentencepiece::SentencePieceProcessor processor;
    std::string path;
};

std::shared_ptr<const SentencePieceModel> sentencepiece_load(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) fail("tokenizer: cannot open {}", path);
    auto model = std::make_shared<SentencePieceModel>();
    model->path = path;
    const auto status = model->processor.Load(path);
    if (!status.ok())
        fail("tokenizer: {} is not a SentencePiece model libsentencepiece can load: {}", path, status.ToString());
    if (model->processor.GetPieceSize() <= 0) fail("tokenizer: {}: the SentencePiece model holds no pieces", path);
    return model;
}

void sentencepiece_encode(const SentencePieceModel& model, std::string_view text, std::vector<int32_t>& out) {
    std::vector<int> ids;
    const auto status = model.processor.Encode(text, &ids);
    if (!status.ok())
        fail("tokenizer: {}: libsentencepiece cannot encode {} bytes: {}", model.path, text.size(), status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
}

std::string sentencepiece_decode(const SentencePieceModel& model, std::span<const int32_t> ids) {
    std::string text;
    const auto status = model.processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok())
        fail("tokenizer: {}: libsentencepiece cannot decode {} ids: {}", model.path, ids.size(), status.ToString());
    return text;
}

Tokenizer tokenizer_load_sentencepiece(const std::string& path) {
    Tokenizer tok;
    tok.kind = TOKENIZER_SENTENCEPIECE;
    tok.source = path;
    auto model = sentencepiece_load(path);
    const auto& sp = model->processor;
    tok.size = sp.GetPieceSize();
    tok.eot = sp.eos_id() >= 0 && sp.eos_id() < tok.size ? sp.eos_id() : -1;
    tok.eot_text = tok.eot >= 0 ? sp.IdToPiece(tok.eot) : "";
    tok.bos = sp.bos_id() >= 0 && sp.bos_id() < tok.size ? sp.bos_id() : -1;
    // Control pieces (<s>, </s>) have no surface text: with allow_special their literal text is them.
    for (int id = 0; id < tok.size; id++)
        if (sp.IsControl(id) && !sp.IdToPiece(id).empty()) {
            AddedToken t;
            t.content = sp.IdToPiece(id);
            t.id = id;
            t.special = true;
            tok.added_tokens.push_back(t);
        }
    tokenizer_prepare_added(tok);
    tok.sentencepiece = std::move(model);
    return tok;
}

}  // namespace skew::data
