// Real vocabularies against independent JavaScript tokenizers: Qwen3, Llama 3 and a GPT-NeoX-style
// (NFKC, ByteLevel with GPT-2's pattern) tokenizer.json, Mistral's SentencePiece-style tokenizer.json
// (Mixtral 8x7B's vocabulary), and Llama 2's SentencePiece tokenizer.model with the tokenizer.json
// transformers makes of it (Mixtral's folder layout: both files), on the committed multilingual text set
// (tests/fixtures/data/multilingual.json). The ids were made by
// tests/reference/tokenizer/make_real_expected.mjs (transformers.js's fork, llama-tokenizer-js) from the
// vocabularies scripts/fetch_tokenizers.sh puts in data/tokenizers/; without them the tests skip.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "data/tokenizer.h"
#include "tests/skip.h"

using namespace skew::data;
namespace fs = std::filesystem;

static const std::string kRoot = SKEW_SOURCE_DIR;

static nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
}

// Every case's ids equal the reference's, and decoding gives the (normalized) text back. `file` of
// data/tokenizers/<name> is read (llama2/ holds both kinds of file); `reference` names the expected ids.
static void check_against_reference(const std::string& name, const std::string& file, TokenizerKind kind,
                                    const std::string& reference = "") {
    const std::string dir = kRoot + "/data/tokenizers/" + name;
    if (!fs::exists(dir + "/" + file)) SKEW_SKIP_TEST("no data/tokenizers vocabulary: run scripts/fetch_tokenizers.sh");
    const Tokenizer tok = file == "tokenizer.model" ? tokenizer_load_sentencepiece(dir + "/" + file)
                                                    : tokenizer_load_json(dir + "/" + file);
    CHECK(tok.kind == kind);
    const nlohmann::json lines = read_json(kRoot + "/tests/fixtures/data/multilingual.json");
    const nlohmann::json expected =
        read_json(kRoot + "/tests/fixtures/data/tokenizer_real/" + (reference.empty() ? name : reference) + ".json");
    REQUIRE(expected["ids"].size() == lines.size());
    std::map<size_t, std::string> normalized;
    for (const auto& n : expected["normalized"]) normalized[n[0].get<size_t>()] = n[1].get<std::string>();
    const bool allow_special = expected["allow_special"].get<bool>();
    TokenizerWorkspace ws;
    size_t tokens = 0, mismatched = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        const std::string text = lines[i].get<std::string>();
        const auto want = expected["ids"][i].get<std::vector<int32_t>>();
        std::vector<int32_t> ids;
        tokenizer_encode(tok, text, ids, ws, allow_special);
        INFO(name << " case " << i << ": " << text);
        CHECK(ids == want);
        mismatched += ids != want;
        tokens += want.size();
        // a SentencePiece-style normalizer prepends "\u2581" to each stretch between special tokens, as
        // transformers' legacy layout does: there the decoded text has one space more after each
        bool special = false;
        for (const AddedToken& a : tok.added_tokens) special |= std::find(ids.begin(), ids.end(), a.id) != ids.end();
        if (kind != TOKENIZER_HF_SENTENCEPIECE_BPE || !special)
            CHECK(tokenizer_decode(tok, ids) == (normalized.count(i) ? normalized[i] : text));
        std::vector<int32_t> again;  // the word cache gives the same ids
        tokenizer_encode(tok, text, again, ws, allow_special);
        CHECK(again == want);
    }
    WARN(name << ": " << lines.size() << " cases, " << tokens << " reference tokens, " << mismatched
              << " cases differing from " << expected["reference"].get<std::string>());
}

TEST_CASE("Qwen3's tokenizer.json gives transformers.js's ids on the multilingual set") {
    check_against_reference("qwen3", "tokenizer.json", TOKENIZER_HF_BYTE_LEVEL_BPE);
}

TEST_CASE("Llama 3's tokenizer.json (ignore_merges) gives transformers.js's ids on the multilingual set") {
    check_against_reference("llama3", "tokenizer.json", TOKENIZER_HF_BYTE_LEVEL_BPE);
}

TEST_CASE(
    "a GPT-NeoX-style tokenizer.json (NFKC, ByteLevel regex) gives transformers.js's ids on the multilingual set") {
    check_against_reference("claude", "tokenizer.json", TOKENIZER_HF_BYTE_LEVEL_BPE);
}

TEST_CASE("Llama 2's SentencePiece tokenizer.model gives llama-tokenizer-js's ids on the multilingual set") {
    check_against_reference("llama2", "tokenizer.model", TOKENIZER_SENTENCEPIECE);
}

TEST_CASE("Llama 2's tokenizer.json, as transformers converts its tokenizer.model, gives the model's ids") {
    check_against_reference("llama2", "tokenizer.json", TOKENIZER_HF_SENTENCEPIECE_BPE);
}

TEST_CASE(
    "Mistral's SentencePiece-style tokenizer.json (Mixtral 8x7B's) gives transformers.js's ids on the multilingual "
    "set") {
    check_against_reference("mistral", "tokenizer.json", TOKENIZER_HF_SENTENCEPIECE_BPE);
}

TEST_CASE("a folder with both tokenizer.json and tokenizer.model (Mixtral's layout) reads tokenizer.json's rules") {
    const std::string dir = kRoot + "/data/tokenizers/llama2";
    if (!fs::exists(dir + "/tokenizer.json"))
        SKEW_SKIP_TEST("no data/tokenizers vocabulary: run scripts/fetch_tokenizers.sh");
    CHECK(tokenizer_load(dir).kind == TOKENIZER_HF_SENTENCEPIECE_BPE);
    CHECK(tokenizer_main_file(dir) == "tokenizer.json");
}

TEST_CASE("real vocabularies name their end-of-text token and size") {
    const std::string dir = kRoot + "/data/tokenizers/";
    if (!fs::exists(dir + "qwen3/tokenizer.json") || !fs::exists(dir + "llama3/tokenizer.json") ||
        !fs::exists(dir + "llama2/tokenizer.model"))
        SKEW_SKIP_TEST("no data/tokenizers vocabulary: run scripts/fetch_tokenizers.sh");
    const Tokenizer qwen = tokenizer_load(dir + "qwen3");
    CHECK(qwen.vocab_size() == 151669);
    CHECK(qwen.eot == 151643);
    CHECK(qwen.eot_text == "<|endoftext|>");
    const Tokenizer llama3 = tokenizer_load(dir + "llama3");
    CHECK(llama3.vocab_size() == 128256);
    CHECK(llama3.eot == 128001);
    CHECK(llama3.eot_text == "<|end_of_text|>");
    const Tokenizer llama2 = tokenizer_load(dir + "llama2");
    CHECK(llama2.vocab_size() == 32000);
    CHECK(llama2.eot == 2);
    CHECK(llama2.eot_text == "</s>");
    CHECK(llama2.bos == 1);
    // Special tokens only when allowed: "<|im_end|>" is one Qwen token, or ordinary text.
    CHECK(tokenizer_encode(qwen, "<|im_end|>", true) == std::vector<int32_t>{151645});
    CHECK(tokenizer_encode(qwen, "<|im_end|>", false).size() > 1);
    CHECK(tokenizer_encode(llama2, "</s>", true) == std::vector<int32_t>{2});
    CHECK(tokenizer_encode(llama2, "</s>", false).size() > 1);
}
