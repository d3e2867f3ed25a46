// The record of what a run trained on (data/shard_identity.h): sizes and MD5s of every shard of
// both splits, compared on resume; and a JSONL record naming its field twice is a bad line.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "data/batch_stream.h"
#include "data/prepare.h"
#include "data/reader.h"
#include "data/shard.h"
#include "data/shard_identity.h"
#include "engine/error.h"

using namespace skew::data;
namespace fs = std::filesystem;

namespace {

std::string scratch(const std::string& name) {
    auto d = fs::temp_directory_path() / ("skew-shard-identity-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d.string();
}

}  // namespace

TEST_CASE("shard identity lists every shard's split, file, size and MD5 and finds the first change") {
    const std::string dir = scratch("identity");
    shard_write(dir + "/train_000000.bin", std::vector<uint16_t>{1, 2, 3, 4, 5});
    shard_write(dir + "/train_000001.bin", std::vector<uint16_t>{6, 7});
    shard_write(dir + "/val_000000.bin", std::vector<uint16_t>{8, 9, 10});
    const TokenSplit train = token_split_open(dir, "train"), val = token_split_open(dir, "val");
    const nlohmann::json was = shard_identity({&train, &val});
    REQUIRE(was["shards"].size() == 3);
    CHECK(was["shards"][0]["split"] == "train");
    CHECK(was["shards"][0]["file"] == "train_000000.bin");
    CHECK(was["shards"][0]["bytes"] == 1024 + 2 * 5);
    CHECK(was["shards"][0]["md5"] == md5_file(dir + "/train_000000.bin"));
    CHECK(was["shards"][2]["split"] == "val");
    CHECK(shard_identity_difference(was, was) == "");
    // Same size, one token replaced.
    shard_write(dir + "/train_000001.bin", std::vector<uint16_t>{6, 70});
    const TokenSplit train2 = token_split_open(dir, "train");
    const std::string diff = shard_identity_difference(was, shard_identity({&train2, &val}));
    CHECK_THAT(diff, Catch::Contains("shard 2 (\"train_000001.bin\"): md5"));
    // One shard fewer.
    fs::remove(dir + "/train_000001.bin");
    const TokenSplit train3 = token_split_open(dir, "train");
    CHECK_THAT(shard_identity_difference(was, shard_identity({&train3, &val})), Catch::Contains("shard 2"));
}

TEST_CASE("resume check: a run without a record passes, one with a changed shard is refused naming it") {
    const std::string dir = scratch("check-data"), run = scratch("check-run");
    shard_write(dir + "/train_000000.bin", std::vector<uint16_t>{1, 2, 3});
    shard_write(dir + "/val_000000.bin", std::vector<uint16_t>{4, 5, 6});
    TokenSplit train = token_split_open(dir, "train"), val = token_split_open(dir, "val");
    shard_identity_check(run, dir, {&train, &val});  // no data_identity.json: an older run
    std::ofstream(run + "/" + kShardIdentityFile)
        << shard_identity({&train, &val}).dump(2) << "\n";  // as the trainer writes it
    shard_identity_check(run, dir, {&train, &val});
    shard_write(dir + "/val_000000.bin", std::vector<uint16_t>{4, 5, 7});
    val = token_split_open(dir, "val");
    try {
        shard_identity_check(run, dir, {&train, &val});
        FAIL("a changed shard was accepted");
    } catch (const skew::Error& e) {
        CHECK_THAT(std::string(e.what()),
                   Catch::Contains("val_000000.bin") && Catch::Contains(run + "/data_identity.json"));
    }
}

TEST_CASE("a JSONL record naming its text field twice is a bad line saying so") {
    DocumentRecord rec;
    rec.is_json = true;
    rec.raw = R"({"text": "first", "text": "second"})";
    std::string text, error;
    CHECK_FALSE(document_parse(rec, "text", text, error));
    CHECK(error == "duplicate key 'text' in the top-level object");
}
