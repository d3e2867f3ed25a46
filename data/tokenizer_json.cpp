// Hugging Face tokenizer.json holding a byte-level BPE (Qwen2/3, Llama 3, GPT-NeoX, OLMoE) or a
// SentencePiece-style BPE with byte_fallback (Llama 2, Mistral, Mixtral): the model's vocab and merges,
// the normalizer, the pre-tokenizer steps, the decoder's rules and the added tokens, read into the
// Tokenizer type (data/tokenizer.h). Anything it cannot encode as Hugging Face's tokenizers would is
// refused in one line naming the file and the field.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <optional>
#include <unordered_map>

#include "data/tokenizer.h"
#include "data/tokenizer_build.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/text.h"

namespace skew::data {

namespace {

using nlohmann::json;

// Ids index a dense table (token_bytes): one far beyond any real vocabulary would size it at
// gigabytes, so ids stop at 2^24 (the largest vocabularies in use hold ~256k).
constexpr int64_t MAX_TOKEN_ID = (int64_t(1) << 24) - 1;

struct JsonReader {
    const std::string& source;

    [[noreturn]] void bad(const std::string& field, const std::string& problem) const {
        fail("tokenizer: {}: {}: {}", source, field, problem);
    }
    static std::string shown(const json& v) {
        std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
        return s.size() > 80 ? s.substr(0, 77) + "..." : s;
    }
    const json& object(const json& j, const std::string& field) const {
        if (!j.is_object()) bad(field, "expected an object, got " + shown(j));
        return j;
    }
    bool boolean(const json& obj, const char* key, bool fallback, const std::string& field) const {
        const auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return fallback;
        if (!it->is_boolean()) bad(field + "." + key, "expected true or false, got " + shown(*it));
        return it->get<bool>();
    }
    std::string string(const json& obj, const char* key, const std::string& field) const {
        const auto it = obj.find(key);
        if (it == obj.end()) bad(field + "." + key, "missing");
        if (!it->is_string()) bad(field + "." + key, "expected a string, got " + shown(*it));
        return it->get<std::string>();
    }
    std::string type(const json& obj, const std::string& field) const {
        return string(object(obj, field), "type", field);
    }
};

// A Replace's pattern: {"String": "text"} (a Regex pattern is not read). Not empty.
std::string string_pattern(const JsonReader& r, const json& obj, const std::string& field) {
    const auto it = obj.find("pattern");
    if (it == obj.end()) r.bad(field + ".pattern", "missing");
    const json& pattern = r.object(*it, field + ".pattern");
    if (!pattern.contains("String"))
        r.bad(field + ".pattern", "expected {\"String\": ...} (a Regex Replace is not supported)");
    const std::string text = r.string(pattern, "String", field + ".pattern");
    if (text.empty()) r.bad(field + ".pattern.String", "is empty");
    return text;
}

// Metaspace's prepend_scheme ("always", "first", "never"), or its older add_prefix_space (true: always).
MetaspacePrepend metaspace_prepend(const JsonReader& r, const json& obj, const std::string& field) {
    if (obj.contains("prepend_scheme") && !obj["prepend_scheme"].is_null()) {
        const std::string scheme = r.string(obj, "prepend_scheme", field);
        if (auto prepend = parse_choice<MetaspacePrepend>(scheme)) return *prepend;
        r.bad(field + ".prepend_scheme",
              fmt::format("\"{}\" is not one of {}", scheme, fmt::join(choice_names<MetaspacePrepend>(), ", ")));
    }
    return r.boolean(obj, "add_prefix_space", true, field) ? METASPACE_ALWAYS : METASPACE_NEVER;
}

void read_normalizer(const JsonReader& r, const json& n, const std::string& field, std::vector<NormalizerStep>& out) {
    if (n.is_null()) return;
    const std::string type = r.type(n, field);
    if (type == "Sequence") {
        const auto it = n.find("normalizers");
        if (it == n.end() || !it->is_array()) r.bad(field + ".normalizers", "expected an array");
        for (size_t i = 0; i < it->size(); i++)
            read_normalizer(r, (*it)[i], fmt::format("{}.normalizers[{}]", field, i), out);
        return;
    }
    NormalizerStep step;
    if (type == "Prepend") {
        step.kind = NormalizerStep::PREPEND;
        step.text = r.string(n, "prepend", field);
    } else if (type == "Replace") {
        step.kind = NormalizerStep::REPLACE;
        step.text = string_pattern(r, n, field);
        step.replacement = r.string(n, "content", field);
    } else {
        const std::optional<NormalizationForm> form = parse_choice<NormalizationForm>(type);
        if (!form)
            r.bad(field + ".type", "\"" + type +
                                       "\" is not supported (skew's tokenizer.json normalizers are NFC, NFD, NFKC, "
                                       "NFKD, Prepend and Replace, a Sequence of those, or none)");
        step.form = *form;
    }
    out.push_back(step);
}

SplitBehavior behavior_of(const JsonReader& r, const std::string& name, const std::string& field) {
    if (auto behavior = parse_choice<SplitBehavior>(name)) return *behavior;
    r.bad(field,
          fmt::format("\"{}\" is not a split behavior ({})", name, fmt::join(choice_names<SplitBehavior>(), ", ")));
}

// sentencepiece: the file's BPE has byte_fallback (a Metaspace step is read; ByteLevel is the caller's to refuse).
void read_pre_tokenizer(const JsonReader& r, const json& p, const std::string& field, bool sentencepiece,
                        std::vector<PreTokenizerStep>& out) {
    const std::string type = r.type(p, field);
    if (type == "Sequence") {
        const auto it = p.find("pretokenizers");
        if (it == p.end() || !it->is_array()) r.bad(field + ".pretokenizers", "expected an array");
        for (size_t i = 0; i < it->size(); i++)
            read_pre_tokenizer(r, (*it)[i], fmt::format("{}.pretokenizers[{}]", field, i), sentencepiece, out);
        return;
    }
    PreTokenizerStep step;
    if (type == "ByteLevel") {
        step.byte_level = true;
        step.add_prefix_space = r.boolean(p, "add_prefix_space", true, field);
        if (r.boolean(p, "use_regex", true, field)) step.regex = tokenizer_gpt2_pattern();
    } else if (type == "Split") {
        const auto it = p.find("pattern");
        if (it == p.end()) r.bad(field + ".pattern", "missing");
        const json& pattern = r.object(*it, field + ".pattern");
        const bool literal = pattern.contains("String");
        if (!literal && !pattern.contains("Regex"))
            r.bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
        const std::string key = literal ? "String" : "Regex";
        const std::string text = r.string(pattern, key.c_str(), field + ".pattern");
        if (text.empty()) r.bad(field + ".pattern." + key, "the pattern is empty");
        step.regex = tokenizer_compile_pattern(text, literal, r.source + ": " + field + ".pattern." + key);
        step.behavior = behavior_of(r, r.string(p, "behavior", field), field + ".behavior");
        step.invert = r.boolean(p, "invert", false, field);
    } else if (type == "Metaspace" && sentencepiece) {
        step.metaspace = true;
        step.replacement = r.string(p, "replacement", field);
        if (step.replacement.empty()) r.bad(field + ".replacement", "is empty");
        step.prepend = metaspace_prepend(r, p, field);
        if (r.boolean(p, "split", true, field)) {  // a piece before each replacement character
            step.regex = tokenizer_compile_pattern(step.replacement, true, r.source + ": " + field + ".replacement");
            step.behavior = SPLIT_MERGED_WITH_NEXT;
        }
    } else {
        r.bad(field + ".type",
              "\"" + type +
                  "\" is not supported (byte-level BPE files pre-tokenize with ByteLevel, Split and "
                  "Sequence; Metaspace is read in a SentencePiece-style file, whose model.byte_fallback is true)");
    }
    out.push_back(step);
}

void read_decoder(const JsonReader& r, const json& d) {
    if (d.is_null()) r.bad("decoder", "missing (a byte-level BPE decodes with a ByteLevel decoder)");
    const std::string type = r.type(d, "decoder");
    if (type != "ByteLevel")
        r.bad("decoder.type", "\"" + type + "\" is not supported (a byte-level BPE decodes with ByteLevel)");
}

// A SentencePiece-style decoder: Sequence of Replace (the space character by " ") or Metaspace,
// ByteFallback, Fuse and Strip (" ", start n, stop 0). Sets the space character and the leading spaces
// stripped. Throws naming the field on any other step, or without a space rule or ByteFallback.
void read_sentencepiece_decoder(const JsonReader& r, const json& d, std::string& space, int32_t& strip) {
    if (d.is_null())
        r.bad("decoder", "missing (a SentencePiece-style BPE decodes with Replace, ByteFallback, Fuse, Strip)");
    std::vector<std::pair<const json*, std::string>> steps;  // (step, field)
    if (r.type(d, "decoder") == "Sequence") {
        const auto it = d.find("decoders");
        if (it == d.end() || !it->is_array()) r.bad("decoder.decoders", "expected an array");
        for (size_t i = 0; i < it->size(); i++) steps.emplace_back(&(*it)[i], fmt::format("decoder.decoders[{}]", i));
    } else {
        steps.emplace_back(&d, "decoder");
    }
    bool byte_fallback = false;
    for (const auto& [step, field] : steps) {
        const std::string type = r.type(*step, field);
        if (type == "Replace") {
            space = string_pattern(r, *step, field);
            if (r.string(*step, "content", field) != " ")
                r.bad(field + ".content", "expected \" \" (the space a piece's character stands for)");
        } else if (type == "Metaspace") {
            space = r.string(*step, "replacement", field);
            strip = metaspace_prepend(r, *step, field) == METASPACE_NEVER ? 0 : 1;
        } else if (type == "Strip") {
            const auto start = step->find("start"), stop = step->find("stop");
            if (r.string(*step, "content", field) != " " || start == step->end() || !start->is_number_integer() ||
                start->get<int64_t>() < 0 ||
                (stop != step->end() && !(stop->is_number_integer() && stop->get<int64_t>() == 0)))
                r.bad(field,
                      "expected {\"content\": \" \", \"start\": n, \"stop\": 0}, got " + JsonReader::shown(*step));
            strip = int32_t(std::min<int64_t>(start->get<int64_t>(), 16));
        } else if (type == "ByteFallback") {
            byte_fallback = true;
        } else if (type != "Fuse") {
            r.bad(field + ".type",
                  "\"" + type +
                      "\" is not supported (a SentencePiece-style BPE decodes with Replace, ByteFallback, "
                      "Fuse and Strip, or Metaspace)");
        }
    }
    if (space.empty()) r.bad("decoder", "has no Replace (or Metaspace) giving the space its pieces stand for");
    if (!byte_fallback) r.bad("decoder", "has no ByteFallback step: its <0xNN> pieces would decode as their names");
}

// One merge: "a b" or ["a", "b"].
void merge_parts(const JsonReader& r, const json& m, size_t i, std::string& a, std::string& b) {
    const std::string field = fmt::format("model.merges[{}]", i);
    if (m.is_string()) {
        const std::string& line = m.get_ref<const std::string&>();
        const size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
            r.bad(field, "expected two tokens separated by one space, got " + JsonReader::shown(m));
        a = line.substr(0, sp);
        b = line.substr(sp + 1);
        return;
    }
    if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
        r.bad(field, "expected \"a b\" or [\"a\", \"b\"], got " + JsonReader::shown(m));
    a = m[0].get<std::string>();
    b = m[1].get<std::string>();
}

}  // namespace

Tokenizer tokenizer_parse_json(std::string_view text, const std::string& source) {
    const JsonReader r{source};
    json j;
    std::string json_error;
    if (!json_try_parse_strict(text, j, json_error)) fail("tokenizer: {} is not valid JSON: {}", source, json_error);
    if (!j.is_object()) fail("tokenizer: {}: expected a JSON object at the top level", source);

    Tokenizer tok;
    tok.source = source;

    // model
    if (!j.contains("model")) r.bad("model", "missing");
    const json& model = r.object(j["model"], "model");
    if (model.contains("type")) {
        const std::string type = r.string(model, "type", "model");
        if (type != "BPE")
            r.bad("model.type", "\"" + type +
                                    "\" is not supported (skew reads byte-level BPE tokenizer.json files; give a "
                                    "SentencePiece model as tokenizer.model)");
    }
    // byte_fallback: a BPE over characters whose vocabulary holds the 256 <0xNN> byte pieces (SentencePiece's)
    const bool sentencepiece = r.boolean(model, "byte_fallback", false, "model");
    tok.kind = sentencepiece ? TOKENIZER_HF_SENTENCEPIECE_BPE : TOKENIZER_HF_BYTE_LEVEL_BPE;
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (model.contains(key) && !model[key].is_null() &&
            !(model[key].is_string() && model[key].get<std::string>().empty()))
            r.bad(std::string("model.") + key,
                  JsonReader::shown(model[key]) + " is not supported (byte-level BPE files have none)");
    if (model.contains("dropout") && !model["dropout"].is_null() &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
        r.bad("model.dropout",
              JsonReader::shown(model["dropout"]) + " is not supported (BPE dropout is for training; use null)");
    tok.whole_piece_first = r.boolean(model, "ignore_merges", false, "model");
    if (!model.contains("vocab")) r.bad("model.vocab", "missing");
    const json& vocab = model["vocab"];
    if (!vocab.is_object() || vocab.empty()) r.bad("model.vocab", "expected an object mapping token -> id");
    if (!model.contains("merges")) r.bad("model.merges", "missing");
    const json& merges = model["merges"];
    if (!merges.is_array()) r.bad("model.merges", "expected an array");

    // added_tokens
    std::vector<AddedToken> added;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
        const json& list = j["added_tokens"];
        if (!list.is_array()) r.bad("added_tokens", "expected an array");
        for (size_t i = 0; i < list.size(); i++) {
            const std::string field = fmt::format("added_tokens[{}]", i);
            const json& t = r.object(list[i], field);
            AddedToken a;
            a.content = r.string(t, "content", field);
            if (a.content.empty()) r.bad(field + ".content", "is empty");
            const auto id = t.find("id");
            if (id == t.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
                id->get<int64_t>() > MAX_TOKEN_ID)
                r.bad(field + ".id", fmt::format("expected an integer in [0, {}], got {}", MAX_TOKEN_ID,
                                                 id == t.end() ? "nothing" : JsonReader::shown(*id)));
            a.id = int32_t(id->get<int64_t>());
            a.special = r.boolean(t, "special", false, field);
            a.normalized = r.boolean(t, "normalized", !a.special, field);
            a.lstrip = r.boolean(t, "lstrip", false, field);
            a.rstrip = r.boolean(t, "rstrip", false, field);
            a.single_word = r.boolean(t, "single_word", false, field);
            added.push_back(std::move(a));
        }
    }

    // vocabulary: ids, bytes, the byte tokens
    int64_t max_id = -1;
    for (auto& [key, value] : vocab.items()) {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > MAX_TOKEN_ID)
            r.bad("model.vocab", fmt::format("token \"{}\" has id {}, expected an integer in [0, {}]", escape_text(key),
                                             JsonReader::shown(value), MAX_TOKEN_ID));
        max_id = std::max<int64_t>(max_id, value.get<int64_t>());
    }
    for (const AddedToken& a : added) max_id = std::max<int64_t>(max_id, a.id);
    tok.token_bytes.assign(size_t(max_id + 1), std::string());
    if (sentencepiece) tok.pieces.assign(tok.token_bytes.size(), std::string());
    std::vector<char> in_model(tok.token_bytes.size(), 0);
    std::unordered_map<std::string, int32_t> id_of;  // vocab string (byte alphabet) -> id
    id_of.reserve(vocab.size() * 2);
    std::string bytes;
    for (auto& [key, value] : vocab.items()) {
        const int32_t id = int32_t(value.get<int64_t>());
        if (in_model[size_t(id)])
            r.bad("model.vocab", fmt::format("two tokens have id {} (\"{}\" is one): decoding it would give either", id,
                                             escape_text(key)));
        in_model[size_t(id)] = 1;
        id_of.emplace(key, id);
        if (sentencepiece) {
            tok.pieces[size_t(id)] = key;  // the decoded text is set with the decoder's rules below
            continue;
        }
        if (!tokenizer_alphabet_to_bytes(key, bytes)) bytes = key;  // outside the byte alphabet: the text itself
        tok.token_bytes[size_t(id)] = bytes;
    }
    for (const AddedToken& a : added) tok.token_bytes[size_t(a.id)] = a.content;
    const auto& b2u = gpt2_byte_to_unicode();
    for (int b = 0; b < 256; b++) {
        std::string u;
        if (sentencepiece) {
            u = fmt::format("<0x{:02X}>", b);
        } else {
            const uint32_t cp = b2u[size_t(b)];
            if (cp < 0x80) u.push_back(char(cp));
            else {
                u.push_back(char(0xC0 | (cp >> 6)));
                u.push_back(char(0x80 | (cp & 0x3F)));
            }
        }
        const auto it = id_of.find(u);
        if (it == id_of.end())
            r.bad("model.vocab",
                  sentencepiece
                      ? fmt::format("lacks the byte piece \"{}\" (byte_fallback reads every byte as its "
                                    "<0xNN> piece)",
                                    u)
                      : fmt::format("lacks the byte-level token \"{}\" of byte {} (not a byte-level BPE?)", u, b));
        tok.byte_token[b] = it->second;
    }

    // merges: rank = position; the first of two equal merges wins
    tokenizer_table_init(tok.merges, merges.size());
    std::string a, b;
    for (size_t i = 0; i < merges.size(); i++) {
        merge_parts(r, merges[i], i, a, b);
        const auto ia = id_of.find(a), ib = id_of.find(b), im = id_of.find(a + b);
        if (ia == id_of.end() || ib == id_of.end() || im == id_of.end())
            r.bad(fmt::format("model.merges[{}]", i),
                  fmt::format("\"{} {}\" uses a token missing from model.vocab", escape_text(a), escape_text(b)));
        tokenizer_table_insert(tok.merges, (uint64_t(uint32_t(ia->second)) << 32) | uint32_t(ib->second),
                               (uint64_t(i) << 32) | uint32_t(im->second));
    }
    if (tok.whole_piece_first || sentencepiece)
        tokenizer_build_whole(tok, in_model);  // SentencePiece-style: its characters

    // normalizer, pre-tokenizer, decoder
    if (j.contains("normalizer")) read_normalizer(r, j["normalizer"], "normalizer", tok.normalizers);
    const bool pre_given = j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null();
    if (!pre_given && !sentencepiece) r.bad("pre_tokenizer", "missing (a byte-level BPE pre-tokenizes with ByteLevel)");
    if (pre_given) read_pre_tokenizer(r, j["pre_tokenizer"], "pre_tokenizer", sentencepiece, tok.pre_tokenizer);
    bool byte_level = false;
    for (const PreTokenizerStep& s : tok.pre_tokenizer) byte_level |= s.byte_level;
    if (!byte_level && !sentencepiece) r.bad("pre_tokenizer", "has no ByteLevel step: not a byte-level BPE");
    if (byte_level && sentencepiece)
        r.bad("pre_tokenizer",
              "has a ByteLevel step, but model.byte_fallback is true: neither a byte-level nor a SentencePiece-style "
              "BPE");
    if (!sentencepiece) {
        read_decoder(r, j.contains("decoder") ? j["decoder"] : json());
    } else {  // each id's text as the decoder gives it: the space character as " ", a byte piece as its byte
        std::string space;
        read_sentencepiece_decoder(r, j.contains("decoder") ? j["decoder"] : json(), space, tok.decode_strip_spaces);
        auto spaced = [&](const std::string& text) {
            std::string out;
            for (size_t pos = 0;;) {
                const size_t hit = text.find(space, pos);
                out.append(text, pos, hit == std::string::npos ? std::string::npos : hit - pos);
                if (hit == std::string::npos) return out;
                out += ' ';
                pos = hit + space.size();
            }
        };
        for (size_t id = 0; id < tok.pieces.size(); id++)
            if (in_model[id]) tok.token_bytes[id] = spaced(tok.pieces[id]);
        for (int b = 0; b < 256; b++) tok.token_bytes[size_t(tok.byte_token[b])] = std::string(1, char(b));
        for (const AddedToken& a : added) tok.token_bytes[size_t(a.id)] = spaced(a.content);
    }

    tok.added_tokens = std::move(added);
    tok.eot = -1;
    tok.eot_text.clear();
    for (std::string_view name : kEndOfTextNames) {
        for (const AddedToken& t : tok.added_tokens)
            if (t.special && t.content == name) {
                tok.eot = t.id;
                tok.eot_text = t.content;
                break;
            }
        if (tok.eot >= 0) break;
    }
    for (const AddedToken& t : tok.added_tokens)
        if (sentencepiece && t.special && t.content == "<s>") tok.bos = t.id;
    tokenizer_prepare_added(tok);
    tok.size = int32_t(tok.token_bytes.size());
    return tok;
}

Tokenizer tokenizer_load_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("tokenizer: cannot open {}", path);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) fail("tokenizer: cannot read {}", path);
    return tokenizer_parse_json(text, path);
}

}  // namespace skew::data
