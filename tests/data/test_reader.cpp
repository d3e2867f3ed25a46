// Reader tests: .txt is one document, .jsonl one per line (field "text", others ignored), bad lines
// named by file and line or skipped, .gz through zlib, directories and globs in sorted order.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <zlib.h>

#include "data/reader.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew::data;
namespace fs = std::filesystem;

static fs::path corpus_dir(const std::string& name) {  // one folder per test case: ctest -j runs them at once
    fs::path d = skew::test::test_temp_root() / ("skew_test_reader_" + name);
    fs::remove_all(d);
    fs::create_directories(d / "sub");
    std::ofstream(d / "a.txt", std::ios::binary) << "First document.\nStill the first.\n";
    std::ofstream(d / "sub" / "b.jsonl", std::ios::binary)
        << "{\"text\": \"line one\", \"url\": \"x\"}\n\n{\"id\": 3, \"text\": \"caf\\u00e9 "
           "\\ud83d\\ude80\"}\r\n{\"text\":\"no newline at end\"}";
    std::ofstream(d / "ignored.csv") << "a,b\n";
    gzFile gz = gzopen((d / "c.jsonl.gz").string().c_str(), "wb");
    std::string z = "{\"text\": \"compressed one\"}\n{\"text\": \"compressed two\"}\n";
    gzwrite(gz, z.data(), unsigned(z.size()));
    gzclose(gz);
    return d;
}

TEST_CASE("a directory yields its .txt .jsonl and .gz files in sorted order") {
    fs::path d = corpus_dir("dir");
    auto files = expand_inputs({d.string()});
    REQUIRE(files.size() == 3);
    CHECK(fs::path(files[0]).filename() == "a.txt");
    CHECK(fs::path(files[1]).filename() == "c.jsonl.gz");
    CHECK(fs::path(files[2]).filename() == "b.jsonl");
    auto docs = read_documents({d.string()});
    REQUIRE(docs.size() == 6);
    CHECK(docs[0] == "First document.\nStill the first.\n");
    CHECK(docs[1] == "compressed one");
    CHECK(docs[2] == "compressed two");
    CHECK(docs[3] == "line one");
    CHECK(docs[4] == "café 🚀");
    CHECK(docs[5] == "no newline at end");
    fs::remove_all(d);
}

TEST_CASE("globs and explicit files are read and a pattern matching nothing is an error") {
    fs::path d = corpus_dir("glob");
    CHECK(read_documents({(d / "*.txt").string()}).size() == 1);
    CHECK(read_documents({(d / "sub" / "b.jsonl").string(), (d / "a.txt").string()}).size() == 4);
    CHECK_THROWS_WITH(read_documents({(d / "*.nothing").string()}), Catch::Contains("matches no"));
    CHECK_THROWS_WITH(read_documents({(d / "ignored.csv").string()}), Catch::Contains("ignored.csv"));
    fs::remove_all(d);
}

TEST_CASE("a bad .jsonl line is reported with its line number or skipped") {
    fs::path d = skew::test::test_temp_root() / "skew_test_reader_bad";
    fs::remove_all(d);
    fs::create_directories(d);
    std::ofstream(d / "bad.jsonl") << "{\"text\": \"ok\"}\n{\"text\": \"ok2\"}\n{broken\n{\"title\": \"no "
                                      "text\"}\n{\"text\": 5}\n{\"text\": \"last\"}\n";
    CHECK_THROWS_WITH(read_documents({(d / "bad.jsonl").string()}), Catch::Contains("bad.jsonl:3"));
    auto docs = read_documents({(d / "bad.jsonl").string()}, true);
    CHECK(docs == std::vector<std::string>{"ok", "ok2", "last"});
    fs::remove_all(d);
}

TEST_CASE("a symbolic link loop under an input is an error naming the link") {
    fs::path d = corpus_dir("loop");
    const fs::path self = d / "self.txt";
    fs::create_symlink("self.txt", self);  // self.txt -> itself
    CHECK_THROWS_WITH(expand_inputs({d.string()}),
                      Catch::Contains(self.string()) && Catch::Contains("symbolic link loop"));
    CHECK_THROWS_WITH(expand_inputs({self.string()}),
                      Catch::Contains(self.string()) && Catch::Contains("symbolic link loop"));
    CHECK_THROWS_AS(expand_inputs({d.string()}), skew::Error);
    fs::remove(self);

    const fs::path up = d / "sub" / "up";
    fs::create_directory_symlink("..", up);  // sub/up -> d, which holds sub: walked forever
    CHECK_THROWS_WITH(expand_inputs({d.string()}), Catch::Contains(up.string()) &&
                                                       Catch::Contains("symbolic link loop") &&
                                                       Catch::Contains("leads back to"));
    CHECK_THROWS_AS(expand_inputs({d.string()}), skew::Error);
    fs::remove(up);

    // A link to a folder outside the walk is followed, and a dangling link is skipped.
    fs::path other = corpus_dir("loop_other");
    fs::create_directory_symlink(other / "sub", d / "linked");
    fs::create_symlink("missing.txt", d / "dangling.txt");
    auto files = expand_inputs({d.string()});
    REQUIRE(files.size() == 4);
    CHECK(files[3] == (d / "sub" / "b.jsonl").string());
    CHECK(files[2] == (d / "linked" / "b.jsonl").string());
    fs::remove_all(d);
    fs::remove_all(other);
}
