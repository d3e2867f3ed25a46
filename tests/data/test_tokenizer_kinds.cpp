// The tokenizer.json and tokenizer.model kinds on tiny vocabularies with ids worked out by hand: both
// merge forms, merge ranks, ignore_merges, added and special tokens (lstrip/rstrip, single_word), the
// ByteLevel prefix space, every Split behavior, NFC, the one-line errors; GPT-2's files as a tokenizer.json
// give tiktoken's ids; a tiny SentencePiece model (tests/reference/tokenizer/make_tiny_sentencepiece.sh):
// byte fallback, end-of-text, control pieces. The folder's files choose the kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
        else { out.push_back(char(0xC0 | (cp >> 6))); out.push_back(char(0x80 | (cp & 0x3F))); }
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
    return json{{"version", "1.0"},
                {"added_tokens", json::array()},
                {"normalizer", nullptr},
                {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
                {"post_processor", nullptr},
                {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
                {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", m}}}};
}

static Tokenizer parse(const json& j) { return tokenizer_parse_json(j.dump(), "tiny/tokenizer.json"); }

static json added(const std::string& content, int id, bool special, bool lstrip = false, bool rstrip = false,
                  bool single_word = false) {
    return json{{"id", id},           {"content", content}, {"single_word", single_word}, {"lstrip", lstrip},
                {"rstrip", rstrip},   {"normalized", false}, {"special", special}};
}

TEST_CASE("tokenizer.json merges in both forms apply by rank") {
    const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}};
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
    j["added_tokens"] = json::array({added("<think>", 300, false), added("<|eot|>", 301, true), added("<mask>", 302, true, true, true),
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
        k["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               json::array({{{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", behavior}, {"invert", invert}},
                                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}};
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
    k["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
                                                         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}})}};
    CHECK(tokenizer_encode(parse(k), "a\xE3\x80\x80" "b c") == Ids{'a', 'b', 'c'});
}

TEST_CASE("an NFC normalizer composes before pre-tokenization, and bytes that are not UTF-8 pass through") {
    json j = tiny({}, {});
    CHECK(tokenizer_encode(parse(j), "e\xCC\x81") == Ids{'e', 0xCC, 0x81});
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
    const Tokenizer nfc = parse(j);
    CHECK(tokenizer_encode(nfc, "e\xCC\x81") == Ids{0xC3, 0xA9});
    CHECK(tokenizer_decode(nfc, tokenizer_encode(nfc, "caf" "e\xCC\x81" "\xFF\xFE")) == "caf\xC3\xA9\xFF\xFE");
}

TEST_CASE("GPT-2's vocabulary as a tokenizer.json gives tiktoken's ids") {
    // encoder.json + vocab.bpe rewritten the way Hugging Face's gpt2 tokenizer.json holds them.
    std::ifstream ef(kFixtures + "/gpt2/encoder.json"), mf(kFixtures + "/gpt2/vocab.bpe"), cf(kFixtures + "/tokenizer_expected.json");
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
    k["model"]["byte_fallback"] = true;
    refused(k, "model.byte_fallback");
    k = j;
    k["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}};
    refused(k, "pre_tokenizer.type: \"Metaspace\" is not supported");
    k = j;
    k["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}, {"invert", false}}})}};
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
    CHECK_THROWS_WITH(tokenizer_parse_json("{\"model\": ", "tiny/tokenizer.json"), Catch::Contains("tiny/tokenizer.json is not valid JSON"));
    CHECK_THROWS_WITH(tokenizer_load_json("/nonexistent/tokenizer.json"), Catch::Contains("cannot open /nonexistent/tokenizer.json"));
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

TEST_CASE("a folder's files choose the kind: tokenizer.json, then tokenizer.model, then GPT-2's") {
    const fs::path dir = skew::test::test_temp_root() / "skew_test_tokenizer_choice";
    fs::create_directories(dir);
    fs::copy_file(kFixtures + "/gpt2/encoder.json", dir / "encoder.json", fs::copy_options::overwrite_existing);
    fs::copy_file(kFixtures + "/gpt2/vocab.bpe", dir / "vocab.bpe", fs::copy_options::overwrite_existing);
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_GPT2_BPE);
    CHECK(tokenizer_main_file(dir.string()) == "encoder.json");
    fs::copy_file(kFixtures + "/sentencepiece_tiny/tokenizer.model", dir / "tokenizer.model", fs::copy_options::overwrite_existing);
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_SENTENCEPIECE);
    { std::ofstream(dir / "tokenizer.json") << tiny({}, {}).dump(); }
    CHECK(tokenizer_load(dir.string()).kind == TOKENIZER_HF_BYTE_LEVEL_BPE);
    CHECK(tokenizer_main_file(dir.string()) == "tokenizer.json");
    fs::remove_all(dir);
    CHECK_THROWS_WITH(tokenizer_load(dir.string()), Catch::Contains("holds no tokenizer.json, tokenizer.model"));
}
