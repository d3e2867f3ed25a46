// Split tests: buckets of known strings against MD5 digests computed independently (Python's
// hashlib), the 1024-code-point prefix for multi-byte text, and the train/val threshold.
#include <catch2/catch.hpp>

#include "data/split.h"
#include "engine/error.h"

using namespace skew::data;

static std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; i++) out += s;
    return out;
}

TEST_CASE("MD5 through OpenSSL EVP matches the RFC 1321 digests") {
    CHECK(md5_hex("") == "d41d8cd98f00b204e9800998ecf8427e");
    CHECK(md5_hex("The quick brown fox jumps over the lazy dog") == "9e107d9d372bb6826bd81d3542a419d6");
}

TEST_CASE("bucket is the first 8 hex digits of the MD5 mod 1000") {
    // md5("") = d41d8cd9..., 0xd41d8cd9 = 3558706393 -> 393
    CHECK(split_bucket("") == 393);
    CHECK(split_bucket("hello world") == 147);  // 5eb63bbb...
    CHECK(split_bucket("The quick brown fox jumps over the lazy dog") == 861);
    CHECK(split_bucket("document 10") == 993);  // c865d199...
    CHECK(split_bucket("document 80") == 958);
}

TEST_CASE("only the first 1024 code points are hashed whatever their byte length") {
    // 2000 x "é": the first 1024 code points are 2048 bytes; md5 = 1bccca26...
    CHECK(utf8_prefix_bytes(repeat("é", 2000), 1024) == 2048);
    CHECK(split_bucket(repeat("é", 2000)) == 926);
    // 1000 ASCII letters then 100 rockets (4 bytes each): 1000 + 24*4 = 1096 bytes; md5 = 74245bf1...
    std::string mixed = repeat("a", 1000) + repeat("🚀", 100);
    CHECK(utf8_prefix_bytes(mixed, 1024) == 1096);
    CHECK(split_bucket(mixed) == 889);
    // 1800 CJK characters: 3072 bytes hashed; md5 = fe97d0e9...
    CHECK(split_bucket(repeat("日本語", 600)) == 281);
    // Text past the prefix does not change the bucket.
    CHECK(split_bucket(repeat("x", 1024)) == 434);
    CHECK(split_bucket(repeat("x", 1024) + "anything after") == 434);
    CHECK(split_bucket(repeat("é", 1024) + "z") == split_bucket(repeat("é", 1024)));
    CHECK(split_bucket(repeat("é", 1023) + "z") != split_bucket(repeat("é", 1023)));
}

TEST_CASE("train when bucket < 950 at the default val_ratio 0.05") {
    CHECK(split_train_buckets(0.05) == 950);
    CHECK(split_train_buckets(0.0) == 1000);
    CHECK(split_train_buckets(0.1) == 900);
    CHECK(split_is_train("hello world", 0.05));                                  // 147
    CHECK(split_is_train("The quick brown fox jumps over the lazy dog", 0.05));  // 861
    CHECK_FALSE(split_is_train("document 80", 0.05));                            // 958
    CHECK(split_is_train("document 80", 0.04));                                  // 958 < 960
    CHECK_FALSE(split_is_train("document 10", 0.05));                            // 993
    CHECK_THROWS_AS(split_train_buckets(1.5), skew::Error);
    CHECK_THROWS_AS(split_train_buckets(-0.1), skew::Error);
}
