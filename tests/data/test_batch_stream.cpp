// Batch stream tests: x/y are the same window shifted by one, consecutive batches start B*T apart
// (sharing one boundary token), shard boundaries are invisible, a resume equals an uninterrupted
// run, a split too small for one batch is an error that names both numbers, a token id past the
// vocabulary is refused naming its shard and offset, and manifests are compared by their shards.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "data/batch_stream.h"
#include "data/shard.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew::data;
namespace fs = std::filesystem;

// Writes tokens 0..n-1 (mod 50000) across shards of the given sizes as dir/<split>_%06d.bin.
static fs::path make_split(const std::string& name, const std::string& split, const std::vector<int>& sizes) {
    fs::path dir = skew::test::test_temp_root() / ("skew_test_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    int next = 0;
    for (size_t s = 0; s < sizes.size(); s++) {
        std::vector<uint16_t> tokens;
        for (int i = 0; i < sizes[s]; i++) tokens.push_back(uint16_t(next++ % 50000));
        char file[64];
        std::snprintf(file, sizeof file, "%s_%06zu.bin", split.c_str(), s);
        shard_write((dir / file).string(), tokens);
    }
    return dir;
}

TEST_CASE("batch i is the window of B*T + 1 tokens at i*B*T and y is x shifted by one") {
    fs::path dir = make_split("stream_shift", "train", {1000});
    TokenSplit split = token_split_open(dir.string(), "train");
    REQUIRE(split.tokens == 1000);
    const int64_t B = 4, T = 8;
    BatchStream stream = batch_stream_make(split, B, T);
    CHECK(stream.num_batches == (1000 - 1) / 32);
    std::vector<int32_t> x(B * T), y(B * T);
    for (int64_t i = 0; i < 3; i++) {
        batch_stream_get(stream, i, x.data(), y.data());
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                REQUIRE(x[b * T + t] == i * B * T + b * T + t);
                REQUIRE(y[b * T + t] == i * B * T + b * T + t + 1);
            }
    }
    // Boundary: the last target of batch i is the first input of batch i + 1.
    std::vector<int32_t> x1(B * T), y1(B * T);
    batch_stream_get(stream, 0, x.data(), y.data());
    batch_stream_get(stream, 1, x1.data(), y1.data());
    CHECK(y.back() == x1.front());
    fs::remove_all(dir);
}

TEST_CASE("shard boundaries are invisible and the stream wraps after the last full batch") {
    fs::path dir = make_split("stream_shards", "val", {10, 1, 0, 50, 39});
    TokenSplit split = token_split_open(dir.string(), "val");
    REQUIRE(split.tokens == 100);
    REQUIRE(split.paths.size() == 5);
    BatchStream stream = batch_stream_make(split, 3, 5);  // 15 per batch; (100-1)/15 = 6 batches
    REQUIRE(stream.num_batches == 6);
    std::vector<int32_t> x(15), y(15);
    batch_stream_get(stream, 5, x.data(), y.data());
    for (int k = 0; k < 15; k++) {
        REQUIRE(x[k] == 75 + k);
        REQUIRE(y[k] == 76 + k);
    }
    std::vector<int32_t> x0(15), y0(15);
    batch_stream_get(stream, 0, x0.data(), y0.data());
    batch_stream_get(stream, 6, x.data(), y.data());
    CHECK(x == x0);
    CHECK(y == y0);
    fs::remove_all(dir);
}

TEST_CASE("a resumed stream equals an uninterrupted one") {
    fs::path dir = make_split("stream_resume", "train", {300, 300, 400});
    TokenSplit split = token_split_open(dir.string(), "train");
    BatchStream full = batch_stream_make(split, 2, 16);
    std::vector<std::vector<int32_t>> xs, ys;
    std::vector<int32_t> x(32), y(32);
    for (int i = 0; i < 40; i++) {  // past one epoch (31 batches)
        batch_stream_next(full, x.data(), y.data());
        xs.push_back(x);
        ys.push_back(y);
    }
    BatchStream first = batch_stream_make(split, 2, 16);
    for (int i = 0; i < 17; i++) batch_stream_next(first, x.data(), y.data());
    BatchStream resumed = batch_stream_make(split, 2, 16, first.position);
    for (int i = 17; i < 40; i++) {
        batch_stream_next(resumed, x.data(), y.data());
        REQUIRE(x == xs[i]);
        REQUIRE(y == ys[i]);
    }
    CHECK(resumed.position == 40);
    fs::remove_all(dir);
}

TEST_CASE("a split with fewer tokens than one batch is an error with both numbers") {
    fs::path dir = make_split("stream_small", "val", {64});
    TokenSplit split = token_split_open(dir.string(), "val");
    CHECK_NOTHROW(batch_stream_make(split, 3, 21));  // 63 + 1 = 64 fits exactly
    CHECK_THROWS_WITH(batch_stream_make(split, 4, 16), Catch::Contains("64 tokens") && Catch::Contains("65"));
    CHECK_THROWS_WITH(token_split_open(dir.string(), "train"), Catch::Contains("no train shards"));
    BatchStream stream = batch_stream_make(split, 1, 9);  // (64 - 1) / 9 = 7 distinct batches
    CHECK_NOTHROW(batch_stream_require(stream, 7, "eval_batches"));
    CHECK_THROWS_WITH(batch_stream_require(stream, 8, "eval_batches"),
                      Catch::Contains("needs 8") && Catch::Contains("only 7") && Catch::Contains("64 tokens"));
    fs::remove_all(dir);
}

TEST_CASE("llm.c shard names are found by split") {
    fs::path dir = make_split("stream_llmc", "fineweb_train", {20, 20});
    fs::path val = dir / "fineweb_val_000000.bin";
    shard_write(val.string(), std::vector<uint16_t>(5, 1));
    TokenSplit train = token_split_open(dir.string(), "train");
    CHECK(train.tokens == 40);
    CHECK(token_split_open(dir.string(), "val").tokens == 5);
    fs::remove_all(dir);
}

TEST_CASE("a shard written by llm.c's write_datafile loads unchanged") {
    // tests/fixtures/data/llmc/tiny_val_000000.bin was written with the logic of llm.c's
    // dev/data/data_common.py (numpy int32 header, uint16 tokens): "<eot>Hello world! This is a test.<eot>The quick brown fox."
    TokenSplit split = token_split_open(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data/llmc", "val");
    REQUIRE(split.tokens == 15);
    std::vector<int32_t> tokens(15);
    token_split_read(split, 0, 15, tokens.data());
    CHECK(tokens ==
          std::vector<int32_t>{50256, 15496, 995, 0, 770, 318, 257, 1332, 13, 50256, 464, 2068, 7586, 21831, 13});
}

TEST_CASE("a stream position maps to its shard file and the token's offset there, empty shards skipped") {
    fs::path dir = make_split("stream_locate", "val", {10, 1, 0, 50, 39});
    TokenSplit split = token_split_open(dir.string(), "val");
    ShardPosition p = token_split_locate(split, 0);
    CHECK(p.path == (dir / "val_000000.bin").string());
    CHECK(p.offset == 0);
    p = token_split_locate(split, 10);
    CHECK(p.path == (dir / "val_000001.bin").string());
    CHECK(p.offset == 0);
    p = token_split_locate(split, 11);  // val_000002.bin is empty
    CHECK(p.path == (dir / "val_000003.bin").string());
    CHECK(p.offset == 0);
    p = token_split_locate(split, 99);
    CHECK(p.path == (dir / "val_000004.bin").string());
    CHECK(p.offset == 38);
    CHECK_THROWS_WITH(token_split_locate(split, 100), Catch::Contains("token 100 is outside split val of 100 tokens"));
    fs::remove_all(dir);
}

TEST_CASE("a batch with a token id past the vocabulary is refused naming the shard file and the offset") {
    fs::path dir = make_split("stream_bad_id", "train", {10, 0, 50});
    // Token 5 of the third shard (stream position 15) becomes 60000, past a 50000-token vocabulary.
    std::vector<uint16_t> third = shard_read((dir / "train_000002.bin").string());
    third[5] = 60000;
    shard_write((dir / "train_000002.bin").string(), third);
    TokenSplit split = token_split_open(dir.string(), "train");
    BatchStream stream = batch_stream_make(split, 2, 4);  // 8 tokens a batch: batch 1 holds positions 8..16
    std::vector<int32_t> x(8), y(8);
    batch_stream_get(stream, 0, x.data(), y.data());
    CHECK_NOTHROW(batch_stream_check_ids(stream, 0, x.data(), y.data(), 50000));
    batch_stream_get(stream, 1, x.data(), y.data());
    CHECK_THROWS_WITH(batch_stream_check_ids(stream, 1, x.data(), y.data(), 50000),
                      Catch::Contains("data: split train: token id 60000 at offset 5 of shard " +
                                      (dir / "train_000002.bin").string() +
                                      " (byte 1034) is outside the model's vocabulary (model.vocab_size 50000)"));
    CHECK_NOTHROW(batch_stream_check_ids(stream, 1, x.data(), y.data(), 60001));
    // The window's last token (only in y): batch 0 of 7-token sequences ends at position 15.
    BatchStream seven = batch_stream_make(split, 1, 15);
    std::vector<int32_t> x7(15), y7(15);
    batch_stream_get(seven, 0, x7.data(), y7.data());
    CHECK(y7.back() == 60000);
    CHECK_THROWS_WITH(batch_stream_check_ids(seven, 0, x7.data(), y7.data(), 50000),
                      Catch::Contains("at offset 5 of shard"));
    fs::remove_all(dir);
}

TEST_CASE("two manifests differ in their shards or counts, not in their timings") {
    const std::string was = R"({"seconds": 1.5, "created_by": "skew prepare 0.1.0",
        "documents": {"train": 90, "val": 10, "total": 100}, "tokens": {"train": 900, "val": 100, "total": 1000},
        "shards": [{"file": "train_000000.bin", "split": "train", "tokens": 900, "md5": "aa"},
                   {"file": "val_000000.bin", "split": "val", "tokens": 100, "md5": "bb"}]})";
    nlohmann::json now = nlohmann::json::parse(was);
    now["seconds"] = 9.0;
    CHECK(manifest_first_difference(was, now.dump()).empty());
    now["shards"][1]["md5"] = "cc";
    CHECK(manifest_first_difference(was, now.dump()) ==
          "shard 2 (\"val_000000.bin\"): md5 \"bb\" in the run's copy, \"cc\" now");
    now = nlohmann::json::parse(was);
    now["shards"][0]["tokens"] = 901;
    CHECK(manifest_first_difference(was, now.dump()) ==
          "shard 1 (\"train_000000.bin\"): tokens 900 in the run's copy, 901 now");
    now = nlohmann::json::parse(was);
    now["shards"].push_back({{"file", "val_000001.bin"}, {"split", "val"}, {"tokens", 5}, {"md5", "dd"}});
    CHECK(manifest_first_difference(was, now.dump()) ==
          "2 shards in the run's copy, 3 now (first unmatched: \"val_000001.bin\")");
    now = nlohmann::json::parse(was);
    now["documents"]["val"] = 11;
    CHECK(manifest_first_difference(was, now.dump()) == "documents.val: 10 in the run's copy, 11 now");
    CHECK_THROWS_WITH(manifest_first_difference(was, "not json"),
                      Catch::Contains("manifest.json is not a JSON object"));
}

TEST_CASE("a manifest whose separator is not a string is refused naming the file and the key") {
    const fs::path dir = skew::test::test_temp_root() / "skew_test_manifest_types";
    fs::create_directories(dir);
    const std::string path = (dir / "manifest.json").string();
    for (const char* text : {R"({"separator": 1})", R"({"separator": ["eot"]})", R"({"separator": null})"}) {
        std::ofstream(path) << text;
        INFO(text);
        CHECK_THROWS_WITH(token_split_check_manifest(dir.string(), "eot", 50257, 0.05),
                          Catch::Contains(path + ": 'separator' must be a string, got "));
    }
    std::ofstream(path) << R"({"separator": "eot"})";
    CHECK(token_split_check_manifest(dir.string(), "eot", 50257, 0.05));
}

TEST_CASE("the opened shards are the ones manifest.json lists, with its token counts") {
    fs::path dir = make_split("listed", "train", {1000, 500});
    auto write_manifest = [&](const nlohmann::json& shards) {
        std::ofstream(dir / "manifest.json") << nlohmann::json{{"separator", "eot"}, {"shards", shards}}.dump();
    };
    const nlohmann::json both = {{{"file", "train_000000.bin"}, {"split", "train"}, {"tokens", 1000}},
                                 {{"file", "train_000001.bin"}, {"split", "train"}, {"tokens", 500}},
                                 {{"file", "val_000000.bin"}, {"split", "val"}, {"tokens", 7}}};
    write_manifest(both);
    token_split_check_listed(dir.string(), token_split_open(dir.string(), "train"));
    // A shard copied in after prepare.
    shard_write((dir / "train_000002.bin").string(), std::vector<uint16_t>(300, 1));
    CHECK_THROWS_WITH(token_split_check_listed(dir.string(), token_split_open(dir.string(), "train")),
                      Catch::Contains("holds train_000002.bin, a train shard that " + (dir / "manifest.json").string() +
                                      " does not list"));
    fs::remove(dir / "train_000002.bin");
    // A count that disagrees, and a listed shard that is gone.
    nlohmann::json changed = both;
    changed[1]["tokens"] = 501;
    write_manifest(changed);
    CHECK_THROWS_WITH(token_split_check_listed(dir.string(), token_split_open(dir.string(), "train")),
                      Catch::Contains("train_000001.bin holds 500 tokens, but " + (dir / "manifest.json").string() +
                                      " lists 501 for it"));
    changed = both;
    changed.push_back({{"file", "train_000009.bin"}, {"split", "train"}, {"tokens", 5}});
    write_manifest(changed);
    CHECK_THROWS_WITH(token_split_check_listed(dir.string(), token_split_open(dir.string(), "train")),
                      Catch::Contains("lists train shard train_000009.bin, which " + dir.string() + " does not hold"));
    fs::remove(dir / "manifest.json");  // llm.c's shards come without one
    token_split_check_listed(dir.string(), token_split_open(dir.string(), "train"));
}
