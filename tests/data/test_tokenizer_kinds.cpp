// The tokenizer.json and tokenizer.model kinds on tiny vocabularies with ids worked out by hand: both
// merge forms, merge ranks, ignore_merges, added and special tokens (lstrip/rstrip, single_word), the
// ByteLevel prefix space, every Split behavior, NFC, the one-line errors; GPT-2's files as a tokenizer.json
// give tiktoken's ids; a tiny SentencePiece model (tests/reference/tokenizer/make_tiny_sentencepiece.sh):
// byte fallback, end-of-text, control pieces; a SentencePiece-style tokenizer.json (byte_fallback,
// Prepend and Replace, Metaspace, its decoder) by hand, and Mixtral's fixture folder's tokenizer.json
// against its tokenizer.model. The folder's files choose the kind.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/tokenizer.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew::data;
using nlohmann::json;
namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

static const std::string kFixtures = std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data";

// The byte-level spelling of a byte string (GPT-2's byte alphabet).
static std::string alphabet(const std::string& bytes) {
    std::string out;
    for (unsigned char b : bytes) {
        const uint32_t cp = gpt2_byte_to_unicode()[b];
        if (cp < 0x80) out.push_back(char(cp));
        else {
            out.push_back(char(0xC0 | (cp >> 6)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        }
    }
    return out;
}

// A tokenizer.json whose vocabulary is the 256 bytes (byte b has id b) then `extra` (ids 256, 257, ...),
// with merges given as "a b" strings of byte strings, a ByteLevel pre-tokenizer and decoder.
static json tiny(const std::vector<std::string>& extra, const std::vector<std::pair<std::string, std::string>>& merges,
                 bool pair_form = false) {
    json vocab = json::object();
    for (int b = 0; b < 256; b++) vocab[alphabet(std::string(1, char(b)))] = b;
    for (size_t i = 0; i < extra.size(); i++) vocab[alphabet(extra[i])] = 256 + int(i);
    json m = json::array();
    for (const auto& [a, b] : merges) {
        if (pair_form) m.push_back(json::array({alphabet(a), alphabet(b)}));
        else m.push_back(alphabet(a) + " " + alphabet(b));
    }
    return json{
        {"version", "1.0"},
        {"added_tokens", json::array()},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", m}}}};
}

static Tokenizer parse(const json& j) { return tokenizer_parse_json(j.dump(), "tiny/tokenizer.json"); }

static json added(const std::string& content, int id, bool special, bool lstrip = false, bool rstrip = false,
                  bool single_word = false) {
    return json{{"id", id},         {"content", content},  {"single_word", single_word}, {"lstrip", lstrip},
                {"rstrip", rstrip}, {"normalized", false}, {"special", special}};
}

TEST_CASE("tokenizer.json merges in both forms apply by rank") {
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
    const std::vector<std::string> extra = {"he", "ll", "hell", "hello"};
    const Tokenizer strings = parse(tiny(extra, merges)), pairs = parse(tiny(extra, merges, true));
    CHECK(strings.kind == TOKENIZER_HF_BYTE_LEVEL_BPE);
    CHECK(tokenizer_encode(strings, "hello") == Ids{259});
    CHECK(tokenizer_encode(pairs, "hello") == Ids{259});
    CHECK(tokenizer_encode(strings, "hell") == Ids{258});
    CHECK(tokenizer_encode(strings, "help") == Ids{256, 'l', 'p'});
    CHECK(tokenizer_encode(pairs, "help hello") == Ids{256, 'l', 'p', ' ', 259});  // " hello": no merge takes the space
    // The lower rank acts first: "e l" before "h e" splits "hel" as h + el; the other order as he + l.
    const Tokenizer el_first = parse(tiny({"el", "he"}, {{"e", "l"}, {"h", "e"}}));
    const Tokenizer he_first = parse(tiny({"el", "he"}, {{"h", "e"}, {"e", "l"}}));
    CHECK(tokenizer_encode(el_first, "hel") == Ids{'h', 256});
    CHECK(tokenizer_encode(he_first, "hel") == Ids{257, 'l'});
}

TEST_CASE("ignore_merges makes a whole-word vocabulary hit win over the merges") {
    json j = tiny({"he", "hello"}, {{"h", "e"}});  // "hello" is a token no merge builds
    CHECK(tokenizer_encode(parse(j), "hello") == Ids{256, 'l', 'l', 'o'});
    j["model"]["ignore_merges"] = true;
    CHECK(tokenizer_encode(parse(j), "hello") == Ids{257});
    CHECK(tokenizer_encode(parse(j), "hel") == Ids{256, 'l'});
}

TEST_CASE("added tokens match before pre-tokenization and special ones only when allowed") {
    json j = tiny({"ab"}, {{"a", "b"}});
    j["added_tokens"] =
        json::array({added("<think>", 300, false), added("<|eot|>", 301, true), added("<mask>", 302, true, true, true),
                     added("xy", 303, false, false, false, true)});
    const Tokenizer tok = parse(j);
    CHECK(tok.vocab_size() == 304);
    CHECK(tok.eot == -1);  // <|eot|> is not an end-of-text name
    CHECK(tokenizer_encode(tok, "a<think>b") == Ids{'a', 300, 'b'});
    CHECK(tokenizer_encode(tok, "a<think>b", true) == Ids{'a', 300, 'b'});
    CHECK(tokenizer_encode(tok, "a<|eot|>b", true) == Ids{'a', 301, 'b'});
    CHECK(tokenizer_encode(tok, "a<|eot|>b") == Ids{'a', '<', '|', 'e', 'o', 't', '|', '>', 'b'});
    // lstrip and rstrip take the spaces around the token; without them the spaces are text.
    CHECK(tokenizer_encode(tok, "ab <mask> ab", true) == Ids{256, 302, 256});
    CHECK(tokenizer_encode(tok, "ab <|eot|> ab", true) == Ids{256, ' ', 301, ' ', 256});
    // single_word: "xy" is the token alone, not inside a word.
    CHECK(tokenizer_encode(tok, "xy zxy xy.") == Ids{303, ' ', 'z', 'x', 'y', ' ', 303, '.'});
    CHECK(tokenizer_decode(tok, Ids{'a', 300, 301, 302}) == "a<think><|eot|><mask>");
    // The end-of-text token is the first special one of the names skew knows.
    j["added_tokens"].push_back(added("<|end_of_text|>", 304, true));
    j["added_tokens"].push_back(added("<|endoftext|>", 305, true));
    const Tokenizer with_eot = parse(j);
    CHECK(with_eot.eot == 305);
    CHECK(with_eot.eot_text == "<|endoftext|>");
}

TEST_CASE("ByteLevel add_prefix_space puts a space before each stretch between added tokens") {
    json j = tiny({}, {});
    j["added_tokens"] = json::array({added("<think>", 300, false)});
    CHECK(tokenizer_encode(parse(j), "hi<think>yo") == Ids{'h', 'i', 300, 'y', 'o'});
    j["pre_tokenizer"]["add_prefix_space"] = true;
    CHECK(tokenizer_encode(parse(j), "hi<think>yo") == Ids{' ', 'h', 'i', 300, ' ', 'y', 'o'});
    CHECK(tokenizer_encode(parse(j), " hi") == Ids{' ', 'h', 'i'});  // already starts with a space
}

TEST_CASE("Split pre-tokenizers give Hugging Face's pieces under every behavior") {
    // Merges that show piece boundaries: "a " (256), " b" (257), "  " (258).
    json j = tiny({"a ", " b", "  "}, {{"a", " "}, {" ", "b"}, {" ", " "}});
    auto with = [&](const char* behavior, bool invert) {
        json k = j;
        k["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             json::array(
                 {{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", behavior}, {"invert", invert}},
                  {{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", false},
                   {"use_regex", false}}})}};
        return tokenizer_encode(parse(k), "a b  c");
    };
    CHECK(with("Isolated", false) == Ids{'a', ' ', 'b', ' ', ' ', 'c'});
    CHECK(with("Removed", false) == Ids{'a', 'b', 'c'});
    CHECK(with("MergedWithPrevious", false) == Ids{256, 'b', ' ', ' ', 'c'});
    CHECK(with("MergedWithNext", false) == Ids{'a', 257, ' ', ' ', 'c'});
    CHECK(with("Contiguous", false) == Ids{'a', ' ', 'b', 258, 'c'});
    CHECK(with("Removed", true) == Ids{' ', ' ', ' '});
    // A Regex pattern; \s is Unicode White_Space (U+3000 is one).
    json k = j;
    k["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}};
    CHECK(tokenizer_encode(parse(k),
                           "a\xE3\x80\x80"
                           "b c") == Ids{'a', 'b', 'c'});
}

TEST_CASE("an NFC normalizer composes before pre-tokenization, and bytes that are not UTF-8 pass through") {
    json j = tiny({}, {});
    CHECK(tokenizer_encode(parse(j), "e\xCC\x81") == Ids{'e', 0xCC, 0x81});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
    const Tokenizer nfc = parse(j);
    CHECK(tokenizer_encode(nfc, "e\xCC\x81") == Ids{0xC3, 0xA9});
    CHECK(tokenizer_decode(nfc, tokenizer_encode(nfc,
                                                 "caf"
                                                 "e\xCC\x81"
                                                 "\xFF\xFE")) == "caf\xC3\xA9\xFF\xFE");
}

TEST_CASE("GPT-2's vocabulary as a tokenizer.json gives tiktoken's ids") {
    // encoder.json + vocab.bpe rewritten the way Hugging Face's gpt2 tokenizer.json holds them.
    std::ifstream ef(kFixtures + "/gpt2/encoder.json"), mf(kFixtures + "/gpt2/vocab.bpe"),
        cf(kFixtures + "/tokenizer_expected.json");
    json vocab = json::parse(ef), merges = json::array();
    for (std::string line; std::getline(mf, line);)
        if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
    json j = tiny({}, {});
    j["model"]["vocab"] = vocab;
    j["model"]["merges"] = merges;
    j["added_tokens"] = json::array({added("<|endoftext|>", 50256, true)});
    const fs::path dir = skew::test::test_temp_root() / "skew_test_gpt2_tokenizer_json";
    fs::create_directories(dir);
    { std::ofstream(dir / "tokenizer.json") << j.dump(); }
    const Tokenizer tok = tokenizer_load(dir.string());  // tokenizer.json chosen by the folder
    CHECK(tok.kind == TOKENIZER_HF_BYTE_LEVEL_BPE);
    CHECK(tok.eot == 50256);
    const json cases = json::parse(cf);
    for (const auto& c : cases) {
        if (!c.contains("text")) continue;  // the hex cases are not UTF-8: Hugging Face reads only text
        INFO("case: " << c["name"].get<std::string>());
        CHECK(tokenizer_encode(tok, c["text"].get<std::string>()) == c["ids"].get<Ids>());
    }
    CHECK(tokenizer_encode(tok, "a<|endoftext|>b", true) == Ids{64, 50256, 65});
    fs::remove_all(dir);
}

TEST_CASE("tokenizer.json files skew cannot encode are refused in one line naming the file and field") {
    auto refused = [](const json& j, const std::string& part) {
        CHECK_THROWS_WITH(parse(j), Catch::Contains("tiny/tokenizer.json") && Catch::Contains(part));
    };
    json j = tiny({"he"}, {{"h", "e"}});
    json k = j;
    k["model"]["type"] = "WordPiece";
    refused(k, "model.type: \"WordPiece\" is not supported");
    k = j;
    k["model"]["byte_fallback"] = true;  // a SentencePiece-style BPE: its vocabulary holds <0xNN> pieces
    refused(k, "model.vocab: lacks the byte piece \"<0x00>\"");
    k = j;
    k["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
    refused(k, "pre_tokenizer.type: \"Metaspace\" is not supported");
    k = j;
    k["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}, {"invert", false}}})}};
    refused(k, "pre_tokenizer.pretokenizers[0].pattern.Regex: PCRE2 cannot compile");
    k["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "a";
    refused(k, "pre_tokenizer: has no ByteLevel step");
    k["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
    refused(k, "pre_tokenizer.pretokenizers[0].behavior: \"Sideways\" is not a split behavior");
    k = j;
    k["normalizer"] = {{"type", "Lowercase"}};
    refused(k, "normalizer.type: \"Lowercase\" is not supported");
    k = j;
    k["decoder"] = {{"type", "Metaspace"}};
    refused(k, "decoder.type: \"Metaspace\" is not supported");
    k = j;
    k["model"]["merges"].push_back(alphabet("x") + " " + alphabet("y"));
    refused(k, "model.merges[1]: \"x y\" uses a token missing from model.vocab");
    k = j;
    k["model"]["merges"].push_back("a b c");
    refused(k, "model.merges[1]: expected two tokens separated by one space");
    k = j;
    k["model"]["vocab"].erase(alphabet("\n"));
    refused(k, "model.vocab: lacks the byte-level token");
    k = j;
    k["added_tokens"] = json::array({{{"id", -1}, {"content", "x"}}});
    refused(k, "added_tokens[0].id");
    k = j;
    k.erase("model");
    refused(k, "model: missing");
    CHECK_THROWS_WITH(tokenizer_parse_json("{\"model\": ", "tiny/tokenizer.json"),
                      Catch::Contains("tiny/tokenizer.json is not valid JSON"));
    CHECK_THROWS_WITH(tokenizer_load_json("/nonexistent/tokenizer.json"),
                      Catch::Contains("cannot open /nonexistent/tokenizer.json"));
}

TEST_CASE("a SentencePiece tokenizer.model encodes through libsentencepiece with byte fallback and its end-of-text") {
    const std::string dir = kFixtures + "/sentencepiece_tiny";
    const Tokenizer tok = tokenizer_load(dir);
    CHECK(tok.kind == TOKENIZER_SENTENCEPIECE);
    CHECK(tok.vocab_size() == 320);
    CHECK(tok.eot == 2);
    CHECK(tok.eot_text == "</s>");
    CHECK(tok.bos == 1);
    // "▁hello" 267, "▁world" 285, "▁" 293 (this model's pieces); "€" is not in it: bytes E2 82 AC at 3 + byte.
    CHECK(tokenizer_encode(tok, "hello world \xE2\x82\xAC") == Ids{267, 285, 293, 3 + 0xE2, 3 + 0x82, 3 + 0xAC});
    CHECK(tokenizer_decode(tok, Ids{267, 285, 293, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}) == "hello world \xE2\x82\xAC");
    CHECK(tokenizer_decode(tok, Ids{1, 267, 2}) == "hello");  // control pieces decode to nothing
    CHECK(tokenizer_encode(tok, "hello</s>", true) == Ids{267, 2});
    CHECK(tokenizer_encode(tok, "hello</s>").size() > 2);
    CHECK_THROWS_AS(tokenizer_decode(tok, Ids{320}), skew::Error);
    const fs::path bad = skew::test::test_temp_root() / "skew_test_bad_sentencepiece";
    fs::create_directories(bad);
    { std::ofstream(bad / "tokenizer.model") << "not a model"; }
    CHECK_THROWS_WITH(tokenizer_load(bad.string()), Catch::Contains((bad / "tokenizer.model").string()) &&
                                                        Catch::Contains("not a SentencePiece model"));
    fs::remove_all(bad);
}

// A SentencePiece-style tokenizer.json (Llama 2's and Mixtral's layout, as transformers converts a
// tokenizer.model): <unk> 0, <s> 1, </s> 2, the byte pieces <0xNN> at 3 + NN, then "▁" 259, "a" 260,
// "b" 261, "▁a" 262, "ab" 263, "▁ab" 264; merges "▁ a", "a b", "▁a b"; Prepend "▁" and Replace " "
// by "▁"; no pre-tokenizer; Replace, ByteFallback, Fuse, Strip.
static json tiny_sentencepiece() {
    const std::string u = "\xE2\x96\x81";  // ▁
    json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
    char name[8];
    for (int b = 0; b < 256; b++) {
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        vocab[name] = 3 + b;
    }
    vocab[u] = 259, vocab["a"] = 260, vocab["b"] = 261, vocab[u + "a"] = 262, vocab["ab"] = 263, vocab[u + "ab"] = 264;
    json added_tokens = json::array({added("<unk>", 0, true), added("<s>", 1, true), added("</s>", 2, true)});
    return json{
        {"version", "1.0"},
        {"added_tokens", added_tokens},
        {"normalizer",
         {{"type", "Sequence"},
          {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", u}},
                                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", u}}})}}},
        {"pre_tokenizer", nullptr},
        {"decoder",
         {{"type", "Sequence"},
          {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", u}}}, {"content", " "}},
                                    {{"type", "ByteFallback"}},
                                    {{"type", "Fuse"}},
                                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", "<unk>"},
          {"fuse_unk", true},
          {"byte_fallback", true},
          {"vocab", vocab},
          {"merges", json::array({u + " a", "a b", u + "a b"})}}}};
}

TEST_CASE(
    "a SentencePiece-style tokenizer.json merges characters, falls back to bytes and decodes as its decoder says") {
    const Tokenizer tok = parse(tiny_sentencepiece());
    CHECK(tok.kind == TOKENIZER_HF_SENTENCEPIECE_BPE);
    CHECK(skew::choice_name(tok.kind) == "hf-sentencepiece-bpe");
    CHECK(tok.eot == 2);
    CHECK(tok.bos == 1);
    // "ab ab" -> "▁ab▁ab": "▁ a" (rank 0) twice, then "▁a b" (rank 2); "a b" (rank 1) never meets an "a"
    CHECK(tokenizer_encode(tok, "ab ab") == Ids{264, 264});
    CHECK(tokenizer_encode(tok, "ba") == Ids{259, 261, 260});  // "▁ b" and "b a" are no merges
    // "é" is no piece: its UTF-8 bytes C3 A9 as <0xC3> <0xA9>; a byte that is not UTF-8 as its piece
    CHECK(tokenizer_encode(tok, "\xC3\xA9") == Ids{259, 3 + 0xC3, 3 + 0xA9});
    CHECK(tokenizer_encode(tok, "a\xFF") == Ids{262, 3 + 0xFF});
    CHECK(tokenizer_encode(tok, "") == Ids{});
    // the decoder: "▁" as a space, bytes fused, one leading space stripped
    CHECK(tokenizer_decode(tok, Ids{264, 264}) == "ab ab");
    CHECK(tokenizer_decode(tok, Ids{259, 3 + 0xC3, 3 + 0xA9}) == "\xC3\xA9");
    for (const std::string text : {"ab ab", " ab", "ab  b ", "\xC3\xA9 a\nb", "a\xFF"}) {
        INFO(text);
        CHECK(tokenizer_decode(tok, tokenizer_encode(tok, text)) == text);
    }
    // special tokens only when allowed; the normalizer (Prepend) runs on each stretch between them
    CHECK(tokenizer_encode(tok, "</s>ab", true) == Ids{2, 264});
    CHECK(tokenizer_encode(tok, "</s>ab").size() > 2);
    // Metaspace instead (transformers' non-legacy layout): "first" prepends "▁" at the text's start only
    json m = tiny_sentencepiece();
    m["normalizer"] = nullptr;
    m["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}};
    const Tokenizer meta = parse(m);
    CHECK(tokenizer_encode(meta, "ab ab") == Ids{264, 264});
    CHECK(tokenizer_encode(meta, "</s>ab", true) == Ids{2, 263});
    m["pre_tokenizer"]["prepend_scheme"] = "always";
    CHECK(tokenizer_encode(parse(m), "</s>ab", true) == Ids{2, 264});
    // what a SentencePiece-style file must hold
    auto refused = [](const json& j, const std::string& part) {
        CHECK_THROWS_WITH(parse(j), Catch::Contains("tiny/tokenizer.json") && Catch::Contains(part));
    };
    json k = tiny_sentencepiece();
    k["model"]["vocab"].erase("<0x0A>");
    refused(k, "model.vocab: lacks the byte piece \"<0x0A>\"");
    k = tiny_sentencepiece();
    k["decoder"]["decoders"].erase(1);
    refused(k, "decoder: has no ByteFallback step");
    k = tiny_sentencepiece();
    k["decoder"] = {{"type", "ByteLevel"}};
    refused(k, "decoder.type: \"ByteLevel\" is not supported");
    k = tiny_sentencepiece();
    k["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
    refused(k, "pre_tokenizer: has a ByteLevel step, but model.byte_fallback is true");
    k = tiny_sentencepiece();
    k["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
    refused(k, "normalizer.normalizers[1].pattern: expected {\"String\": ...}");
}

TEST_CASE("Mixtral's folder: its tokenizer.json gives the ids of its tokenizer.model on the multilingual set") {
    // tests/reference/hf/mixtral: the 302-piece model of tests/fixtures/data/sentencepiece_302 and the
    // tokenizer.json transformers makes of it (tests/reference/tokenizer/sentencepiece_to_json.py)
    const std::string dir = std::string(SKEW_SOURCE_DIR) + "/tests/reference/hf/mixtral";
    const Tokenizer json_tok = tokenizer_load(dir);
    REQUIRE(json_tok.kind == TOKENIZER_HF_SENTENCEPIECE_BPE);
    const Tokenizer model_tok = tokenizer_load_sentencepiece(dir + "/tokenizer.model");
    CHECK(json_tok.vocab_size() == model_tok.vocab_size());
    CHECK(json_tok.eot == model_tok.eot);
    CHECK(json_tok.bos == model_tok.bos);
    std::ifstream f(kFixtures + "/multilingual.json");
    std::vector<std::string> texts = json::parse(f).get<std::vector<std::string>>();
    for (const char* extra : {"", " ", "  two  spaces ", "\n\n", " leading", "trailing ", "hello world \xE2\x82\xAC"})
        texts.push_back(extra);
    size_t tokens = 0;
    for (const std::string& text : texts) {
        INFO(text);
        const Ids ids = tokenizer_encode(json_tok, text);
        CHECK(ids == tokenizer_encode(model_tok, text));
        CHECK(tokenizer_decode(json_tok, ids) == text);
        tokens += ids.size();
    }
    CHECK(tokens > 2000);  // the texts are mostly bytes to this small vocabulary
    CHECK(tokenizer_encode(json_tok, "hello</s>", true) == tokenizer_encode(model_tok, "hello</s>", true));
}

TEST_CASE("a folder's files choose the kind: tokenizer.json, then tokenizer.model, then GPT-2's") {
    const fs::path dir = skew::test::test_temp_root() / "skew_test_tokenizer_choice";
    fs::create_directories(dir);
    fs::copy_file(kFixtures + "/gpt2/encoder.json", dir / "encoder.json", fs::copy_options::overwrite_existing);
    fs::copy_file(kFixtures + "/gpt2/vocab.bpe", dir / "vocab.bpe", fs::copy_options::overwrite_existing);
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_GPT2_BPE);
    CHECK(tokenizer_main_file(dir.string()) == "encoder.json");
    fs::copy_file(kFixtures + "/sentencepiece_tiny/tokenizer.model", dir / "tokenizer.model",
                  fs::copy_options::overwrite_existing);
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_SENTENCEPIECE);
    { std::ofstream(dir / "tokenizer.json") << tiny({}, {}).dump(); }
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_HF_BYTE_LEVEL_BPE);
    CHECK(tokenizer_main_file(dir.string()) == "tokenizer.json");
    fs::remove_all(dir);
    CHECK_THROWS_WITH(tokenizer_load(dir.string()), Catch::Contains("holds no tokenizer.json, tokenizer.model"));
}
