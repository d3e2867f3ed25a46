// `skew prepare` and `skew tokenize` tests: shards hold, per split and in input order, EOT + the
// tokens of each document (or no separator), the manifest counts agree with the shards, bad lines
// are fatal or skipped per the flag, and the command-line tools round-trip text through ids.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/batch_stream.h"
#include "data/prepare.h"
#include "data/reader.h"
#include "data/shard.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew::data;
namespace fs = std::filesystem;

static const std::string kSource = SKEW_SOURCE_DIR;
static const std::string kTokenizer = kSource + "/tests/fixtures/data/gpt2";

static fs::path make_corpus(const std::string& name) {
    fs::path d = skew::test::test_temp_root() / ("skew_test_" + name);
    fs::remove_all(d);
    fs::create_directories(d / "in");
    std::ofstream jl(d / "in" / "docs.jsonl", std::ios::binary);
    for (int i = 0; i < 100; i++)
        jl << nlohmann::json{{"text", "document " + std::to_string(i) + " says hello, world."}}.dump() << "\n";
    jl.close();
    std::ofstream(d / "in" / "story.txt", std::ios::binary)
        << std::ifstream(kSource + "/tests/fixtures/data/sample_english.txt").rdbuf();
    return d;
}

static std::vector<int32_t> read_split(const std::string& dir, const std::string& split) {
    TokenSplit s = token_split_open(dir, split);
    std::vector<int32_t> out(size_t(s.tokens));
    token_split_read(s, 0, s.tokens, out.data());
    return out;
}

TEST_CASE("prepare writes EOT and document tokens per split in input order with a matching manifest") {
    fs::path d = make_corpus("prepare_eot");
    PrepareOptions o;
    o.inputs = {(d / "in").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.shard_tokens = 1000;  // forces several train shards
    o.threads = 2;
    o.chunk_bytes = 2000;  // forces several chunks
    PrepareSummary s = prepare_run(o);

    Tokenizer tok = tokenizer_load(kTokenizer);
    std::vector<int32_t> expect_train, expect_val;
    int64_t docs_train = 0, docs_val = 0;
    for (const auto& doc : read_documents(o.inputs)) {  // same order: docs.jsonl then story.txt
        bool train = split_bucket(doc) < 950;
        auto& e = train ? expect_train : expect_val;
        e.push_back(50256);
        auto ids = tokenizer_encode(tok, doc);
        e.insert(e.end(), ids.begin(), ids.end());
        (train ? docs_train : docs_val)++;
    }
    REQUIRE(docs_val > 0);  // "document 10", "document 12", ... hash to val buckets
    CHECK(read_split(o.out_dir, "train") == expect_train);
    CHECK(read_split(o.out_dir, "val") == expect_val);
    CHECK(s.documents_train == docs_train);
    CHECK(s.documents_val == docs_val);

    auto m = nlohmann::json::parse(std::ifstream(s.manifest));
    CHECK(m["documents"]["train"] == docs_train);
    CHECK(m["documents"]["val"] == docs_val);
    CHECK(m["tokens"]["train"] == int64_t(expect_train.size()));
    CHECK(m["tokens"]["val"] == int64_t(expect_val.size()));
    CHECK(m["sources"].size() == 2);
    CHECK(m["tokenizer"]["md5"]["vocab.bpe"].get<std::string>() == md5_file(kTokenizer + "/vocab.bpe"));
    int64_t shard_tokens = 0;
    for (auto& sh : m["shards"]) {
        std::string path = (fs::path(o.out_dir) / sh["file"].get<std::string>()).string();
        CHECK(shard_check(path) == sh["tokens"].get<int64_t>());
        CHECK(md5_file(path) == sh["md5"].get<std::string>());
        CHECK(sh["tokens"].get<int64_t>() <= 1000);
        shard_tokens += sh["tokens"].get<int64_t>();
    }
    CHECK(shard_tokens == int64_t(expect_train.size() + expect_val.size()));
    for (const auto& e : fs::directory_iterator(o.out_dir)) {  // no temporary, hidden or not, is left
        CHECK(e.path().extension() != ".tmp");
        CHECK(e.path().filename().string()[0] != '.');
    }

    // A second run with bigger shards leaves no stale shard from the first run behind.
    o.shard_tokens = 1'000'000;
    prepare_run(o);
    CHECK(token_split_open(o.out_dir, "train").paths.size() == 1);
    CHECK(read_split(o.out_dir, "train") == expect_train);
    fs::remove_all(d);
}

TEST_CASE(
    "prepare with separator none concatenates documents with nothing between, and the manifest guards the model "
    "vocabulary") {
    fs::path d = make_corpus("prepare_none");
    PrepareOptions o;
    o.inputs = {(d / "in" / "docs.jsonl").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.separator = "none";
    o.val_ratio = 0.0;
    prepare_run(o);
    Tokenizer tok = tokenizer_load(kTokenizer);
    std::vector<int32_t> expect;
    for (const auto& doc : read_documents(o.inputs)) {
        auto ids = tokenizer_encode(tok, doc);
        expect.insert(expect.end(), ids.begin(), ids.end());
    }
    CHECK(read_split(o.out_dir, "train") == expect);
    CHECK(token_split_open(o.out_dir, "val").tokens == 0);
    CHECK(token_split_check_manifest(o.out_dir, "none"));
    CHECK_THROWS_WITH(token_split_check_manifest(o.out_dir, "eot"), Catch::Contains("separator none"));
    CHECK_FALSE(token_split_check_manifest((d / "in").string(), "eot"));  // no manifest: nothing to check
    // GPT-2's 50,257 tokens fit a model of 50,257 or more, not one of 1,000
    CHECK(token_split_check_manifest(o.out_dir, "none", 50257));
    CHECK_THROWS_WITH(token_split_check_manifest(o.out_dir, "none", 1000),
                      Catch::Contains("50257-token vocabulary") && Catch::Contains("model.vocab_size is 1000"));
    fs::remove_all(d);
}

TEST_CASE("the manifest's val_ratio must match the config's data.val_ratio") {
    fs::path d = make_corpus("prepare_val_ratio");
    PrepareOptions o;
    o.inputs = {(d / "in" / "docs.jsonl").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.val_ratio = 0.2;
    prepare_run(o);
    CHECK(token_split_check_manifest(o.out_dir, "eot", 50257, 0.2));
    CHECK(token_split_check_manifest(o.out_dir, "eot", 50257, 0.2000001));  // the same 800 train buckets
    CHECK_THROWS_WITH(token_split_check_manifest(o.out_dir, "eot", 50257, 0.05),
                      Catch::Contains("data.val_ratio: 0.05") && Catch::Contains("--val-ratio 0.2") &&
                          Catch::Contains("skew prepare --val-ratio 0.05"));
    fs::remove_all(d);
}

TEST_CASE("prepare: a bad line is fatal with file and line or skipped and counted") {
    fs::path d = make_corpus("prepare_bad");
    std::ofstream(d / "in" / "docs.jsonl", std::ios::app) << "{\"text\": \"fine\"}\n{oops\n";
    PrepareOptions o;
    o.inputs = {(d / "in" / "docs.jsonl").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.skip_bad_lines = false;
    CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("docs.jsonl:102"));
    o.skip_bad_lines = true;
    PrepareSummary s = prepare_run(o);
    CHECK(s.bad_lines == 1);
    CHECK(s.documents_train + s.documents_val == 101);
    o.separator = "comma";
    CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("separator"));
    fs::remove_all(d);
}

static std::vector<std::string> hidden_files(const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().filename().string()[0] == '.' || e.path().extension() == ".tmp")
            out.push_back(e.path().filename().string());
    return out;
}

TEST_CASE("an interrupted prepare's temporaries are hidden, refuse the folder, and go at the next prepare") {
    fs::path d = make_corpus("prepare_interrupted");
    PrepareOptions o;
    o.inputs = {(d / "in").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.shard_tokens = 1000;
    o.progress = false;
    prepare_run(o);
    const std::vector<int32_t> train = read_split(o.out_dir, "train");
    // What a killed run leaves: its open shard, a finished but unplaced one, the manifest's temporary,
    // and the visible name earlier versions used.
    for (const char* f :
         {".train_000001.bin.tmp-4242", ".val_000000.bin.tmp-4242", ".manifest.json.tmp-4242", "train_000002.bin.tmp"})
        std::ofstream(fs::path(o.out_dir) / f) << "partial";
    CHECK(shard_temp_path((fs::path(o.out_dir) / "train_000001.bin").string()) ==
          (fs::path(o.out_dir) / (".train_000001.bin.tmp-" + std::to_string(::getpid()))).string());
    CHECK(is_prepare_temp_name(".train_000001.bin.tmp-4242"));
    CHECK(is_prepare_temp_name("train_000002.bin.tmp"));
    CHECK_FALSE(is_prepare_temp_name("train_000001.bin"));
    CHECK_FALSE(is_prepare_temp_name(".notes.tmp-1"));
    // The folder is not taken for a complete dataset.
    CHECK_THROWS_WITH(token_split_open(o.out_dir, "train"),
                      Catch::Contains("interrupted (or still running) `skew prepare`") && Catch::Contains(".tmp") &&
                          Catch::Contains("re-run `skew prepare --out " + o.out_dir + "`"));
    // The next prepare of that folder removes them and leaves a complete dataset.
    prepare_run(o);
    CHECK(hidden_files(o.out_dir).empty());
    CHECK(read_split(o.out_dir, "train") == train);
    fs::remove_all(d);
}

TEST_CASE("a prepare that fails midway removes its temporaries and leaves the earlier dataset whole") {
    fs::path d = make_corpus("prepare_failed");
    PrepareOptions o;
    o.inputs = {(d / "in" / "docs.jsonl").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.shard_tokens = 100;  // several shards before the bad line
    o.progress = false;
    PrepareSummary first = prepare_run(o);
    const std::vector<int32_t> train = read_split(o.out_dir, "train"), val = read_split(o.out_dir, "val");
    REQUIRE(first.shards.size() > 4);
    std::ifstream mf(first.manifest, std::ios::binary);
    const std::string manifest((std::istreambuf_iterator<char>(mf)), std::istreambuf_iterator<char>());

    // A second run with other shards (no separator) fails at a bad last line, after several rotations.
    std::ofstream(d / "in" / "docs.jsonl", std::ios::app) << "{oops\n";
    o.separator = "none";
    o.skip_bad_lines = false;
    CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("docs.jsonl:101"));
    CHECK(hidden_files(o.out_dir).empty());
    CHECK(read_split(o.out_dir, "train") == train);
    CHECK(read_split(o.out_dir, "val") == val);
    std::ifstream mf2(first.manifest, std::ios::binary);
    CHECK(std::string((std::istreambuf_iterator<char>(mf2)), std::istreambuf_iterator<char>()) == manifest);
    fs::remove_all(d);
}

static std::string run(const std::string& cmd, int& status) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = pclose(p);
    return out;
}

TEST_CASE("skew tokenize encodes stdin to one line of ids and --decode reverses it") {
    fs::path d = skew::test::test_temp_root() / "skew_test_tokenize_cli";
    fs::create_directories(d);
    std::string text = "Hello world, it's 2026!\n  Café 🚀\n";
    std::ofstream(d / "in.txt", std::ios::binary) << text;
    std::string skew = SKEW_BINARY;
    int status = 0;
    std::string ids = run(skew + " tokenize --tokenizer " + kTokenizer + " < " + (d / "in.txt").string(), status);
    CHECK(status == 0);
    Tokenizer tok = tokenizer_load(kTokenizer);
    std::string expect;
    for (int32_t id : tokenizer_encode(tok, text)) {
        if (!expect.empty()) expect += ' ';
        expect += std::to_string(id);
    }
    CHECK(ids == expect + "\n");
    std::ofstream(d / "ids.txt") << ids;
    CHECK(run(skew + " tokenize --decode --tokenizer " + kTokenizer + " < " + (d / "ids.txt").string(), status) ==
          text);
    CHECK(status == 0);
    std::ofstream(d / "bad.txt") << "15496 99999\n";
    run(skew + " tokenize --decode --tokenizer " + kTokenizer + " < " + (d / "bad.txt").string() + " 2>/dev/null",
        status);
    CHECK(status != 0);
    fs::remove_all(d);
}

TEST_CASE("a second prepare into the same folder fails at once and leaves the first's temporaries alone") {
    fs::path d = make_corpus("prepare_locked");
    PrepareOptions o;
    o.inputs = {(d / "in").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.progress = false;
    fs::create_directories(o.out_dir);
    // A running prepare: it holds the lock and has a live temporary in the folder.
    const fs::path live = fs::path(o.out_dir) / ".train_000000.bin.tmp-4242";
    std::ofstream(live) << "being written";
    {
        const int fd = ::open((fs::path(o.out_dir) / ".skew-prepare.lock").c_str(), O_RDWR | O_CREAT, 0644);
        REQUIRE(fd >= 0);
        REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
        CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("another skew prepare is writing " + o.out_dir));
        CHECK(fs::exists(live));
        CHECK_FALSE(fs::exists(fs::path(o.out_dir) / "manifest.json"));
        ::close(fd);  // the first run ends: its lock goes with it
    }
    fs::remove(live);
    PrepareSummary s = prepare_run(o);
    CHECK(s.documents_train + s.documents_val == 101);
    CHECK(hidden_files(o.out_dir).empty());  // the lock file goes with the run
    fs::remove_all(d);
}

TEST_CASE("a prepare that reads no documents places nothing into --out") {
    fs::path d = make_corpus("prepare_nofield");
    PrepareOptions o;
    o.inputs = {(d / "in" / "docs.jsonl").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.progress = false;
    o.field = "nosuch";
    CHECK_THROWS_WITH(prepare_run(o), Catch::Contains("no documents were read") && Catch::Contains("--field"));
    CHECK_FALSE(fs::exists(o.out_dir));
    // Into the folder of an earlier dataset: that dataset stays whole.
    o.field = "text";
    prepare_run(o);
    const std::vector<int32_t> train = read_split(o.out_dir, "train");
    const std::string manifest = md5_file((fs::path(o.out_dir) / "manifest.json").string());
    o.field = "nosuch";
    CHECK_THROWS(prepare_run(o));
    CHECK(read_split(o.out_dir, "train") == train);
    CHECK(md5_file((fs::path(o.out_dir) / "manifest.json").string()) == manifest);
    CHECK(hidden_files(o.out_dir).empty());
    fs::remove_all(d);
}

TEST_CASE("empty documents are skipped and counted and invalid UTF-8 is counted with its first file") {
    fs::path d = make_corpus("prepare_empty");
    std::ofstream(d / "in" / "empty.txt", std::ios::binary);  // zero bytes
    std::ofstream(d / "in" / "docs.jsonl", std::ios::app) << "{\"text\": \"\"}\n";
    std::ofstream(d / "in" / "latin1.txt", std::ios::binary) << "caf\xe9 au lait\n";
    PrepareOptions o;
    o.inputs = {(d / "in").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = kTokenizer;
    o.progress = false;
    PrepareSummary s = prepare_run(o);
    CHECK(s.documents_train + s.documents_val == 102);  // 100 lines, latin1.txt, story.txt
    CHECK(s.empty_skipped == 2);
    CHECK(s.invalid_utf8 == 1);
    CHECK(s.first_invalid_utf8 == (d / "in" / "latin1.txt").string());
    auto m = nlohmann::json::parse(std::ifstream(s.manifest));
    CHECK(m["documents"]["empty_skipped"] == 2);
    CHECK(m["documents"]["invalid_utf8"] == 1);
    CHECK(m["documents"]["total"] == 102);
    for (auto& src : m["sources"])
        if (src["path"] == (d / "in" / "empty.txt").string()) CHECK(src["documents"] == 0);
    // No lone EOT for an empty document: every EOT is followed by a document's tokens.
    std::vector<int32_t> all = read_split(o.out_dir, "train");
    const std::vector<int32_t> val = read_split(o.out_dir, "val");
    all.insert(all.end(), val.begin(), val.end());
    for (size_t i = 0; i + 1 < all.size(); i++)
        if (all[i] == 50256) CHECK(all[i + 1] != 50256);
    CHECK(all.back() != 50256);
    fs::remove_all(d);
}

TEST_CASE(
    "prepare and tokenize with a tokenizer.json or a tokenizer.model put the tokenizer's end-of-text between "
    "documents") {
    struct Kind {
        std::string dir, kind, main;
        int32_t eot;
        std::string eot_text;
    };
    const std::vector<Kind> kinds = {
        {kSource + "/tests/fixtures/data/hf_tiny", "hf-byte-level-bpe", "tokenizer.json", 300, "<|endoftext|>"},
        {kSource + "/tests/fixtures/data/sentencepiece_tiny", "sentencepiece", "tokenizer.model", 2, "</s>"}};
    for (const Kind& k : kinds) {
        INFO(k.dir);
        fs::path d = make_corpus("prepare_kind_" + k.kind);
        PrepareOptions o;
        o.inputs = {(d / "in").string()};
        o.out_dir = (d / "out").string();
        o.tokenizer_dir = k.dir;
        o.threads = 2;
        PrepareSummary s = prepare_run(o);
        const Tokenizer tok = tokenizer_load(k.dir);
        std::vector<int32_t> expect_train;
        for (const auto& doc : read_documents(o.inputs)) {
            if (split_bucket(doc) >= 950) continue;
            expect_train.push_back(k.eot);
            auto ids = tokenizer_encode(tok, doc);
            expect_train.insert(expect_train.end(), ids.begin(), ids.end());
        }
        CHECK(read_split(o.out_dir, "train") == expect_train);
        auto m = nlohmann::json::parse(std::ifstream(s.manifest));
        CHECK(m["tokenizer"]["kind"] == k.kind);
        CHECK(m["tokenizer"]["eot"] == k.eot);
        CHECK(m["tokenizer"]["eot_text"] == k.eot_text);
        CHECK(m["tokenizer"]["vocab_size"] == tok.vocab_size());
        CHECK(m["tokenizer"]["md5"] == nlohmann::json{{k.main, md5_file(k.dir + "/" + k.main)}});
        // A model vocabulary smaller than the tokenizer's ids is refused before training.
        CHECK_THROWS_WITH(token_split_check_manifest(o.out_dir, "eot", tok.vocab_size() - 1, 0.05),
                          Catch::Contains("set model.vocab_size to at least " + std::to_string(tok.vocab_size())));

        // skew tokenize: the same ids, and --decode gives the text back.
        const std::string text = "the hello world, it's 2026!\n";
        std::ofstream(d / "in.txt", std::ios::binary) << text;
        int status = 0;
        const std::string ids =
            run(std::string(SKEW_BINARY) + " tokenize --tokenizer " + k.dir + " < " + (d / "in.txt").string(), status);
        CHECK(status == 0);
        std::string expect;
        for (int32_t id : tokenizer_encode(tok, text)) {
            if (!expect.empty()) expect += ' ';
            expect += std::to_string(id);
        }
        CHECK(ids == expect + "\n");
        std::ofstream(d / "ids.txt") << ids;
        CHECK(
            run(std::string(SKEW_BINARY) + " tokenize --decode --tokenizer " + k.dir + " < " + (d / "ids.txt").string(),
                status) == text);
        CHECK(status == 0);
        fs::remove_all(d);
    }
    // The hand-made tokenizer.json: "the" merges to 257, " the" to 258, "hello" to 262, <think> is 301.
    CHECK(tokenizer_encode(tokenizer_load(kSource + "/tests/fixtures/data/hf_tiny"), "the<think> the hello") ==
          std::vector<int32_t>{257, 301, 258, 32, 262});
}

TEST_CASE("prepare writes uint32 shards for a vocabulary past 65,536 ids and training reads them") {
    // A tokenizer.json whose end-of-text token has id 70000: 70,001 ids, more than uint16 holds.
    fs::path d = make_corpus("prepare_uint32");
    nlohmann::json j = nlohmann::json::parse(std::ifstream(kSource + "/tests/fixtures/data/hf_tiny/tokenizer.json"));
    j["added_tokens"][0]["id"] = 70000;
    fs::create_directories(d / "tok");
    std::ofstream(d / "tok" / "tokenizer.json") << j.dump();
    PrepareOptions o;
    o.inputs = {(d / "in").string()};
    o.out_dir = (d / "out").string();
    o.tokenizer_dir = (d / "tok").string();
    o.threads = 2;
    PrepareSummary s = prepare_run(o);
    const Tokenizer tok = tokenizer_load(o.tokenizer_dir);
    REQUIRE(tok.vocab_size() == 70001);
    REQUIRE(tok.eot == 70000);
    std::vector<int32_t> expect_train;
    for (const auto& doc : read_documents(o.inputs)) {
        if (split_bucket(doc) >= 950) continue;
        expect_train.push_back(70000);
        auto ids = tokenizer_encode(tok, doc);
        expect_train.insert(expect_train.end(), ids.begin(), ids.end());
    }
    CHECK(read_split(o.out_dir, "train") == expect_train);
    CHECK(shard_header(o.out_dir + "/train_000000.bin").token_bytes == 4);
    auto m = nlohmann::json::parse(std::ifstream(s.manifest));
    CHECK(m["format"]["dtype"] == "uint32");
    CHECK(m["format"]["magic"] == 20240801);
    CHECK(m["format"]["version"] == 7);
    CHECK(token_split_check_manifest(o.out_dir, "eot", 70001, 0.05));
    fs::remove_all(d);
}
