// Shard tests: llm.c .bin layout round trip (header bytes checked by hand), the streaming writer,
// and refusal of truncated, wrong-magic and wrong-version files with the file named.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data/batch_stream.h"
#include "data/shard.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew::data;
namespace fs = std::filesystem;

static fs::path temp_dir(const std::string& name) {
    fs::path d = skew::test::test_temp_root() / ("skew_test_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

static std::string file_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST_CASE("a shard round-trips and has llm.c's header") {
    fs::path dir = temp_dir("shard_roundtrip");
    std::vector<uint16_t> tokens = {50256, 15496, 995, 0, 65535, 1, 2, 3};
    std::string path = (dir / "train_000000.bin").string();
    shard_write(path, tokens);
    CHECK_FALSE(fs::exists(path + ".tmp"));
    CHECK_FALSE(fs::exists(shard_temp_path(path)));
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // the shard alone
    std::string bytes = file_bytes(path);
    REQUIRE(bytes.size() == 1024 + 2 * tokens.size());
    int32_t header[256];
    std::memcpy(header, bytes.data(), 1024);
    CHECK(header[0] == 20240520);
    CHECK(header[1] == 1);
    CHECK(header[2] == int32_t(tokens.size()));
    for (int i = 3; i < 256; i++) REQUIRE(header[i] == 0);
    uint16_t first;
    std::memcpy(&first, bytes.data() + 1024, 2);
    CHECK(first == 50256);
    CHECK(shard_check(path) == int64_t(tokens.size()));
    CHECK(shard_read(path) == tokens);
    fs::remove_all(dir);
}

TEST_CASE("the streaming writer equals the whole-file writer") {
    fs::path dir = temp_dir("shard_stream");
    std::vector<int32_t> a = {1, 2, 3}, b(10000);
    for (size_t i = 0; i < b.size(); i++) b[i] = int32_t(i * 7 % 50257);
    {
        ShardWriter w;
        shard_writer_open(w, (dir / "s.bin").string());
        shard_writer_append(w, a);
        shard_writer_append(w, b);
        CHECK(shard_writer_close(w) == 10003);
    }
    auto got = shard_read((dir / "s.bin").string());
    REQUIRE(got.size() == 10003);
    CHECK(got[2] == 3);
    CHECK(got[10002] == uint16_t(9999 * 7 % 50257));
    {  // an unclosed writer leaves no file behind
        ShardWriter w;
        shard_writer_open(w, (dir / "unfinished.bin").string());
        shard_writer_append(w, a);
    }
    CHECK_FALSE(fs::exists(dir / "unfinished.bin"));
    CHECK_FALSE(fs::exists(dir / "unfinished.bin.tmp"));
    CHECK_FALSE(fs::exists(shard_temp_path((dir / "unfinished.bin").string())));
    {  // while open, the shard is a hidden temporary; shard_writer_finish closes it without the rename
        ShardWriter w;
        shard_writer_open(w, (dir / "later.bin").string());
        CHECK(fs::path(w.temp).filename().string().rfind(".later.bin.tmp-", 0) == 0);
        CHECK(fs::exists(w.temp));
        shard_writer_append(w, a);
        CHECK(shard_writer_finish(w) == 3);
        CHECK_FALSE(fs::exists(dir / "later.bin"));
        CHECK(shard_check(w.temp) == 3);
        fs::remove(w.temp);
    }
    ShardWriter w;
    shard_writer_open(w, (dir / "big.bin").string());
    std::vector<int32_t> too_big = {70000};
    CHECK_THROWS_WITH(shard_writer_append(w, too_big), Catch::Contains("70000"));
    fs::remove_all(dir);
}

TEST_CASE("truncated and wrong-magic and wrong-version shards are refused with the file named") {
    fs::path dir = temp_dir("shard_bad");
    std::vector<uint16_t> tokens(100, 7);
    std::string good = (dir / "good.bin").string();
    shard_write(good, tokens);
    std::string bytes = file_bytes(good);

    std::string truncated = (dir / "truncated.bin").string();
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() - 10);
    CHECK_THROWS_WITH(shard_read(truncated), Catch::Contains("truncated.bin") && Catch::Contains("truncated"));

    std::string short_header = (dir / "short.bin").string();
    std::ofstream(short_header, std::ios::binary) << bytes.substr(0, 100);
    CHECK_THROWS_WITH(shard_check(short_header), Catch::Contains("short.bin") && Catch::Contains("header"));

    std::string magic = (dir / "magic.bin").string();
    std::string m = bytes;
    int32_t bad_magic = 20240801;
    std::memcpy(m.data(), &bad_magic, 4);
    std::ofstream(magic, std::ios::binary) << m;
    CHECK_THROWS_WITH(shard_check(magic), Catch::Contains("magic.bin") && Catch::Contains("20240801"));

    std::string version = (dir / "version.bin").string();
    std::string v = bytes;
    int32_t bad_version = 7;
    std::memcpy(v.data() + 4, &bad_version, 4);
    std::ofstream(version, std::ios::binary) << v;
    CHECK_THROWS_WITH(shard_check(version), Catch::Contains("version.bin") && Catch::Contains("version 7"));

    CHECK_THROWS_WITH(shard_check((dir / "missing.bin").string()), Catch::Contains("missing.bin"));
    fs::remove_all(dir);
}

TEST_CASE("a uint32 shard is llm.c's Llama 3 layout (magic 20240801, version 7) and reads back through every reader") {
    fs::path dir = temp_dir("shard_u32");
    const std::string path = (dir / "train_000000.bin").string();
    const std::vector<int32_t> ids = {151643, 9707, 1879, 0, 65535, 65536, 151668};
    ShardWriter w;
    shard_writer_open(w, path, shard_token_bytes_for(151669));
    shard_writer_append(w, ids);
    CHECK(shard_writer_close(w) == int64_t(ids.size()));
    const std::string bytes = file_bytes(path);
    REQUIRE(bytes.size() == 1024 + 4 * ids.size());
    int32_t header[3];
    std::memcpy(header, bytes.data(), sizeof header);
    CHECK(header[0] == 20240801);
    CHECK(header[1] == 7);
    CHECK(header[2] == int32_t(ids.size()));
    uint32_t sixth;
    std::memcpy(&sixth, bytes.data() + 1024 + 4 * 5, 4);
    CHECK(sixth == 65536u);
    CHECK(shard_header(path).token_bytes == 4);
    CHECK(shard_check(path) == int64_t(ids.size()));
    CHECK(shard_read_ids(path) == ids);
    CHECK_THROWS_WITH(shard_read(path), Catch::Contains("train_000000.bin holds uint32 tokens"));
    const TokenSplit split = token_split_open_files({path}, "train");
    std::vector<int32_t> out(ids.size());
    token_split_read(split, 0, int64_t(ids.size()), out.data());
    CHECK(out == ids);
    CHECK(token_split_locate(split, 5).byte == 1024 + 4 * 5);
    CHECK_THROWS_WITH(token_split_check_ids(split, 0, out.data(), int64_t(out.size()), 151000),
                      Catch::Contains("token id 151643 at offset 0") && Catch::Contains("(byte 1024)"));
    // Up to 65,536 ids the shards stay uint16 (GPT-2's layout, as llm.c's GPT-2 scripts write).
    CHECK(shard_token_bytes_for(50257) == 2);
    CHECK(shard_token_bytes_for(65536) == 2);
    CHECK(shard_token_bytes_for(65537) == 4);
    // The uint32 magic with another version, or the size of a uint16 shard: refused.
    std::string v = bytes;
    int32_t one = 1;
    std::memcpy(v.data() + 4, &one, 4);
    std::ofstream((dir / "v.bin").string(), std::ios::binary) << v;
    CHECK_THROWS_WITH(shard_check((dir / "v.bin").string()),
                      Catch::Contains("magic 20240801 (llm.c's uint32 layout) with version 1, expected 7"));
    std::ofstream((dir / "short.bin").string(), std::ios::binary) << bytes.substr(0, 1024 + 2 * ids.size());
    CHECK_THROWS_WITH(shard_check((dir / "short.bin").string()), Catch::Contains("truncated or corrupt"));
    fs::remove_all(dir);
}
