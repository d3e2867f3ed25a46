// Left-overs of the reliability round, as a user meets them: a symbolic link loop where a run folder
// is expected gives one line naming the path (not the library's raw "filesystem error"), an empty
// `tiers:` mapping under a non-SkewAdam optimizer is refused, and a config with a stray ',' is a
// syntax error rather than a hang.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_util.h"

namespace fs = std::filesystem;

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

std::string scratch(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("skew-reliability-cli-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d.string();
}

std::string write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    return path;
}

}  // namespace

TEST_CASE("a symbolic link loop as the run folder is one clear line naming it, for --out and --resume") {
    const std::string d = scratch("loop");
    fs::create_symlink(d + "/b", d + "/a");
    fs::create_symlink(d + "/a", d + "/b");
    for (const std::string& args : {"train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --out " + d + "/a",
                                    "train --resume " + d + "/a"}) {
        Run r = run(args);
        INFO(args << "\n" << r.output);
        CHECK(r.status == 1);
        CHECK(r.output.find("skew: error: " + d + "/a") != std::string::npos);
        CHECK(r.output.find("symbolic link loop") != std::string::npos);
        CHECK(r.output.find("filesystem error") == std::string::npos);
    }
}

TEST_CASE("an empty tiers mapping under a non-SkewAdam optimizer is refused naming the optimizer") {
    const std::string d = scratch("tiers");
    for (const std::string& body : {std::string("tiers: {}"), std::string("tiers:\n      router: {}")}) {
        const std::string cfg = write(d + "/c.yaml", "optimizers:\n  adamw:\n    " + body + "\n");
        Run r = run("config " + cfg);
        INFO(r.output);
        CHECK(r.status == 1);
        CHECK(r.output.find("optimizers.adamw.tiers: tiers is a SkewAdam setting") != std::string::npos);
    }
    // Under SkewAdam an empty mapping changes nothing and is fine.
    CHECK(run("config " + write(d + "/s.yaml", "optimizers:\n  skewadam:\n    tiers: {}\n")).status == 0);
}

TEST_CASE("a config with a stray comma is a syntax error naming the line, not a hang") {
    const std::string d = scratch("comma");
    Run r = run("config " + write(d + "/c.yaml", "model:\n  d_model: 64\n,:\n"));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("YAML syntax error") != std::string::npos);
}
