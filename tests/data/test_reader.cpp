// Reader tests: .txt is one document, .jsonl one per line (field "text", others ignored), bad lines
// named by file and line or skipped, .gz through zlib, directories and globs in sorted order.
#include <catch2/catch.hpp>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "data/reader.h"
#include "engine/error.h"

using namespace skew::data;
namespace fs = std::filesystem;

static fs::path corpus_dir(const std::string& name) {  // one folder per test case: ctest -j runs them at once
    fs::path d = fs::temp_directory_path() / ("skew_test_reader_" + name);
    fs::remove_all(d);
    fs::create_directories(d / "sub");
    std::ofstream(d / "a.txt", std::ios::binary) << "First document.\nStill the first.\n";
    std::ofstream(d / "sub" / "b.jsonl", std::ios::binary)
        << "{\"text\": \"line one\", \"url\": \"x\"}\n\n{\"id\": 3, \"text\": \"caf\\u00e9 \\ud83d\\ude80\"}\r\n{\"text\":\"no newline at end\"}";
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
    fs::path d = fs::temp_directory_path() / "skew_test_reader_bad";
    fs::remove_all(d);
    fs::create_directories(d);
    std::ofstream(d / "bad.jsonl") << "{\"text\": \"ok\"}\n{\"text\": \"ok2\"}\n{broken\n{\"title\": \"no text\"}\n{\"text\": 5}\n{\"text\": \"last\"}\n";
    CHECK_THROWS_WITH(read_documents({(d / "bad.jsonl").string()}), Catch::Contains("bad.jsonl:3"));
    auto docs = read_documents({(d / "bad.jsonl").string()}, true);
    CHECK(docs == std::vector<std::string>{"ok", "ok2", "last"});
    fs::remove_all(d);
}
