// `skew report RUNDIR` on a committed metrics set (the paper's run: Table 1 and Table 7 values)
// prints the expected Markdown; a folder without metrics or with a broken file is an error naming
// it; tools/plot_metrics.py draws the paper's figures from the same files.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "train_test_util.h"

using namespace train_test;
namespace fs = std::filesystem;

namespace {

std::string skew_cmd(const std::string& args) { return std::string("cd ") + SKEW_SOURCE_DIR + " && " + SKEW_BINARY + " " + args; }

}  // namespace

TEST_CASE("skew report prints the paper's Table 1 and per-evaluation perplexity for the committed metrics set") {
    Output out = shell(skew_cmd("report tests/fixtures/report"));
    REQUIRE(out.status == 0);
    const std::string expected = read_file(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report/expected.md");
    REQUIRE(!expected.empty());
    CHECK(out.text == expected);
    // The rows of the paper's Table 1, in the run's optimizer order.
    CHECK_THAT(out.text, Catch::Contains("| skewadam | 1.29 | 31.30 | 5,000 | 108.4 | 0.0505 |"));
    CHECK_THAT(out.text, Catch::Contains("| muon | 25.27† | 57.60 | 3,409 | 120.2 | 0.0608 |"));
    CHECK(out.text.find("| skewadam |") < out.text.find("| adamw |"));
    CHECK(out.text.find("| muon |") < out.text.find("| lion |"));
}

TEST_CASE("skew report on a small run shows sizes in MiB and marks no best with one optimizer") {
    const std::string dir = scratch("report-one");
    fs::copy_file(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report/metrics_lion.json", dir + "/metrics_lion.json");
    auto j = nlohmann::json::parse(read_file(dir + "/metrics_lion.json"));
    j["paper_state_bytes"] = j["state_bytes"] = 3 * 1048576;
    j["peak_memory_bytes"] = 40 * 1048576;
    write_file(dir + "/metrics_lion.json", j.dump());
    Output out = shell(skew_cmd("report " + dir));
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("| Optimizer | State (MiB) | Peak mem. (MiB) |"));
    CHECK_THAT(out.text, Catch::Contains("| lion | 3.00 | 40.00 | 5,075 | 393.7 | 0.0537 |"));
    CHECK(out.text.find("**") == std::string::npos);
}

TEST_CASE("skew report on a folder without metrics, or with a broken metrics file, exits 1 naming it") {
    const std::string dir = scratch("report-empty");
    Output out = shell(skew_cmd("report " + dir));
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("skew: error: " + dir + ": no metrics_*.json files"));
    write_file(dir + "/metrics_adamw.json", "{\"optimizer\": \"adamw\"}");
    out = shell(skew_cmd("report " + dir));
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains(dir + "/metrics_adamw.json: missing key 'type'"));
    out = shell(skew_cmd("report " + dir + "/absent"));
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("no such run folder"));
}

TEST_CASE("plot_metrics.py draws perplexity, memory and balance-loss figures as PNG into the run folder") {
    if (shell("/usr/bin/python3 -c 'import matplotlib, numpy'").status != 0) {
        WARN("no /usr/bin/python3 with matplotlib (python3-matplotlib): plots not checked");
        return;
    }
    const std::string dir = scratch("plots");
    for (const auto& e : fs::directory_iterator(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report"))
        if (e.path().filename().string().starts_with("metrics_")) fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
    Output out = shell(std::string("/usr/bin/python3 ") + SKEW_SOURCE_DIR + "/tools/plot_metrics.py " + dir);
    INFO(out.text);
    REQUIRE(out.status == 0);
    for (const char* png : {"val_ppl.png", "memory.png", "balance_loss.png", "train_loss.png"}) {
        INFO(png);
        const std::string bytes = read_file(dir + "/" + png);
        REQUIRE(bytes.size() > 1000);
        CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
    }
    Output bad = shell(std::string("/usr/bin/python3 ") + SKEW_SOURCE_DIR + "/tools/plot_metrics.py " + scratch("plots-empty"));
    CHECK(bad.status != 0);
    CHECK_THAT(bad.text, Catch::Contains("no metrics_*.json"));
}
