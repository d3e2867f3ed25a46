// `skew report RUNDIR` on a committed metrics set (the paper's run: Table 1 and Table 7 values)
// prints the expected Markdown; a folder without metrics or with a broken file is an error naming
// it; the run's config.yaml decides which optimizers belong in the table and how many steps make
// one complete (not run, stopped early, stray or out-of-order files); tools/plot_metrics.py draws
// the paper's figures from the same files.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "tests/skip.h"
#include "train/metrics.h"
#include "train_test_util.h"

using namespace train_test;
namespace fs = std::filesystem;

namespace {

std::string skew_cmd(const std::string& args) {
    return std::string("cd ") + SKEW_SOURCE_DIR + " && " + SKEW_BINARY + " " + args;
}

/// A run folder's config.yaml: the tiny model, these optimizers, `steps` steps.
void write_run_config(const std::string& dir, const std::string& optimizers, int64_t steps) {
    std::string yaml = TINY_YAML;
    yaml.replace(yaml.find("optimizers: [skewadam, adamw]"), 29, "optimizers: [" + optimizers + "]");
    yaml.replace(yaml.find("steps: 20"), 9, "steps: " + std::to_string(steps));
    write_file(dir + "/config.yaml", yaml);
}

/// A hand-made metrics_<name>.json: one evaluation per (step, validation perplexity), `steps_done`
/// optimizer steps, written by a run of `train_steps` steps.
void write_run_metrics(const std::string& dir, const std::string& name,
                       const std::vector<std::pair<int64_t, double>>& evals, int64_t steps_done, int64_t train_steps) {
    skew::RunMetrics m;
    m.optimizer = name;
    m.type = name;
    m.config = {{"model", {{"balance_loss_coef", 0.01}, {"moe_blocks", {1}}}},
                {"train", {{"optimizers", {"skewadam", "adamw"}}, {"steps", train_steps}}}};
    m.param_count = 1000;
    m.state_bytes = m.paper_state_bytes = 2 * 1048576;
    m.plan_peak_bytes = 30 * 1048576;
    for (auto [step, ppl] : evals) {
        skew::EvalRecord e;
        e.step = step;
        e.val_loss = std::log(ppl);
        e.val_ppl = ppl;
        e.val_balance_loss = 0.02;
        e.tokens_per_sec = 1000;
        e.peak_memory_bytes = 20 * 1048576;
        skew::add_eval(m, e);
    }
    m.summary = skew::summarize(m.history, skew::RunTotals{steps_done, 0, steps_done * 32, 1.0, 2.0});
    skew::write_metrics(dir, m);
}

std::string metrics_file(const std::string& dir, const std::string& name) { return dir + "/metrics_" + name + ".json"; }

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
    // The fixture's config.yaml lists all four for 10,000 steps: nothing incomplete, nothing unchecked.
    CHECK(out.text.find("ncomplete") == std::string::npos);
    CHECK(out.text.find("could not check") == std::string::npos);
}

TEST_CASE("skew report on a small run shows sizes in MiB and marks no best with one optimizer") {
    const std::string dir = scratch("report-one");
    fs::copy_file(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report/metrics_lion.json",
                  dir + "/metrics_lion.json");
    auto j = nlohmann::json::parse(read_file(dir + "/metrics_lion.json"));
    j["paper_state_bytes"] = j["state_bytes"] = 3 * 1048576;
    j["peak_memory_bytes"] = 40 * 1048576;
    write_file(dir + "/metrics_lion.json", j.dump());
    Output out = shell(skew_cmd("report " + dir));
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("| Optimizer | State (MiB) | Peak mem. (MiB) |"));
    CHECK_THAT(out.text, Catch::Contains("| lion | 3.00 | 40.00 | 5,075 | 393.7 | 0.0537 |"));
    CHECK(out.text.find("**") == std::string::npos);
    // No config.yaml (a folder from before skew wrote one): reported as before, saying what it could not check.
    CHECK_THAT(out.text, Catch::Contains("No config.yaml in " + dir));
    CHECK_THAT(out.text, Catch::Contains("could not check that every configured optimizer ran all its steps"));
    CHECK_THAT(out.text, Catch::Contains("## Table 1: 10,000 steps from a shared initialization\n"));
}

TEST_CASE(
    "skew report on an interrupted run lists the optimizer that never ran and the steps of the one that stopped") {
    // skew train --optimizers skewadam,adamw --set train.steps=30 --stop-after 15 (evaluations every 10 steps).
    const std::string dir = scratch("report-interrupted");
    write_run_config(dir, "skewadam, adamw", 30);
    write_run_metrics(dir, "skewadam", {{10, 50.0}}, 15, 30);
    Output out = shell(skew_cmd("report " + dir));
    INFO(out.text);
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("## Table 1: 30 steps from a shared initialization (incomplete run)"));
    CHECK_THAT(out.text, Catch::Contains("0 of 2 optimizers in " + dir +
                                         "/config.yaml's train.optimizers completed the 30 steps"));
    CHECK_THAT(out.text, Catch::Contains("skewadam at step 15 (its values are from the step-10 evaluation)"));
    CHECK_THAT(out.text, Catch::Contains("Not run (no metrics file): adamw."));
    CHECK_THAT(out.text, Catch::Contains("skew train --resume " + dir));
    CHECK_THAT(out.text, Catch::Contains("| Optimizer | Steps | State (MiB) |"));
    CHECK_THAT(out.text, Catch::Contains("| skewadam | 15 / 30 | 2.00 | 20.00 | 1,000 | 50.0 | 0.0200 |"));
    CHECK_THAT(out.text, Catch::Contains("| adamw | not run (no metrics file) | — | — | — | — | — |"));
    CHECK_THAT(out.text, Catch::Contains("| adamw | — |"));  // its row of the per-evaluation table
    CHECK(out.text.find("**") == std::string::npos);
    CHECK(out.text.find("Bold marks") == std::string::npos);
}

TEST_CASE("skew report lists a configured optimizer whose metrics file is missing as not run") {
    const std::string dir = scratch("report-missing");
    write_run_config(dir, "skewadam, adamw", 30);
    write_run_metrics(dir, "skewadam", {{10, 80.0}, {20, 60.0}, {30, 50.0}}, 30, 30);
    Output out = shell(skew_cmd("report " + dir));
    INFO(out.text);
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("## Table 1: 30 steps from a shared initialization (incomplete run)"));
    CHECK_THAT(out.text, Catch::Contains("1 of 2 optimizers"));
    CHECK_THAT(out.text, Catch::Contains("| skewadam | 30 / 30 |"));
    CHECK_THAT(out.text, Catch::Contains("| adamw | not run (no metrics file) |"));
    CHECK(out.text.find("Stopped early") == std::string::npos);
}

TEST_CASE("skew report bolds the best only among optimizers that completed the configured steps") {
    const std::string dir = scratch("report-bold");
    write_run_config(dir, "skewadam, adamw, lion", 30);
    write_run_metrics(dir, "skewadam", {{10, 80.0}, {20, 60.0}, {30, 50.0}}, 30, 30);
    write_run_metrics(dir, "adamw", {{10, 90.0}, {20, 55.0}, {30, 52.0}}, 30, 30);
    write_run_metrics(dir, "lion", {{10, 40.0}, {20, 30.0}}, 25, 30);  // better, but stopped at step 25
    Output out = shell(skew_cmd("report " + dir));
    INFO(out.text);
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("| skewadam | **80.0** | 60.0 | **50.0** |"));
    CHECK_THAT(out.text, Catch::Contains("| adamw | 90.0 | **55.0** | 52.0 |"));
    CHECK_THAT(out.text, Catch::Contains("| lion | 40.0 | 30.0 | — |"));
    CHECK_THAT(out.text, Catch::Contains("| lion | 25 / 30 |"));
    CHECK_THAT(out.text,
               Catch::Contains("Bold marks the best at each step among the optimizers that completed the 30 steps."));
}

TEST_CASE("skew report ignores, with a warning naming it, a metrics file of an optimizer not in config.yaml") {
    const std::string dir = scratch("report-stray");
    write_run_config(dir, "skewadam, adamw", 30);
    write_run_metrics(dir, "skewadam", {{10, 80.0}, {20, 60.0}, {30, 50.0}}, 30, 30);
    write_run_metrics(dir, "adamw", {{10, 90.0}, {20, 55.0}, {30, 52.0}}, 30, 30);
    write_run_metrics(dir, "lion", {{100, 30.0}, {200, 20.0}, {250, 10.0}}, 250, 250);  // copied from another run
    Output out = shell(skew_cmd("report " + dir));
    INFO(out.text);
    REQUIRE(out.status == 0);
    CHECK_THAT(out.text, Catch::Contains("skew: warning: " + metrics_file(dir, "lion") +
                                         ": ignored; optimizer 'lion' is not in " + dir +
                                         "/config.yaml's train.optimizers (skewadam, adamw)"));
    CHECK_THAT(out.text, Catch::Contains("## Table 1: 30 steps from a shared initialization\n"));
    CHECK(out.text.find("| lion |") == std::string::npos);
    CHECK_THAT(out.text, Catch::Contains("| Step | 10 | 20 | 30 |\n"));
    CHECK(out.text.find("ncomplete") == std::string::npos);
    CHECK_THAT(out.text, Catch::Contains("| skewadam | **80.0** | 60.0 | **50.0** |"));
    CHECK_THAT(out.text, Catch::Contains("Bold marks the best optimizer at each step."));
}

TEST_CASE("skew report refuses a metrics file whose steps are out of order or past train.steps, naming it") {
    const std::string dir = scratch("report-order");
    write_run_config(dir, "skewadam", 30);
    write_run_metrics(dir, "skewadam", {{10, 80.0}, {20, 60.0}, {15, 70.0}, {30, 50.0}}, 30, 30);
    Output out = shell(skew_cmd("report " + dir));
    CHECK(out.status == 1);
    CHECK_THAT(out.text,
               Catch::Contains("skew: error: " + metrics_file(dir, "skewadam") +
                               ": history is not in strictly increasing step order (evaluation 3 is at step 15, "
                               "after step 20)"));
    write_run_metrics(dir, "skewadam", {{10, 80.0}, {20, 60.0}, {30, 50.0}, {999, 45.0}}, 999, 30);
    out = shell(skew_cmd("report " + dir));
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("skew: error: " + metrics_file(dir, "skewadam") +
                                         ": records step 999, past train.steps = 30"));
    // Steps within train.steps but from a run of another length.
    write_run_metrics(dir, "skewadam", {{10, 80.0}}, 10, 10);
    out = shell(skew_cmd("report " + dir));
    CHECK(out.status == 1);
    CHECK_THAT(out.text,
               Catch::Contains(metrics_file(dir, "skewadam") + ": written by a run of train.steps = 10, but " + dir +
                               "/config.yaml says 30"));
    // Without config.yaml the order is still checked.
    const std::string old = scratch("report-order-old");
    write_run_metrics(old, "adamw", {{10, 80.0}, {999, 60.0}, {20, 70.0}}, 20, 20);
    out = shell(skew_cmd("report " + old));
    CHECK(out.status == 1);
    CHECK_THAT(out.text,
               Catch::Contains(metrics_file(old, "adamw") + ": history is not in strictly increasing step order"));
}

TEST_CASE("skew report on a file says it is a file, not a run folder") {
    Output out = shell(skew_cmd("report README.md"));
    CHECK(out.status == 1);
    CHECK_THAT(out.text, Catch::Contains("skew: error: README.md: is a file, not a run folder"));
    CHECK(out.text.find("no such") == std::string::npos);
    out = shell(skew_cmd("report tests/fixtures/report/metrics_adamw.json"));
    CHECK(out.status == 1);
    CHECK_THAT(
        out.text,
        Catch::Contains("is a file, not a run folder; give the folder holding it: skew report tests/fixtures/report"));
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
        SKEW_SKIP_TEST("no /usr/bin/python3 with matplotlib (python3-matplotlib): plots not checked");
    }
    const std::string dir = scratch("plots");
    for (const auto& e : fs::directory_iterator(std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/report"))
        if (e.path().filename().string().starts_with("metrics_"))
            fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
    Output out = shell(std::string("/usr/bin/python3 ") + SKEW_SOURCE_DIR + "/tools/plot_metrics.py " + dir);
    INFO(out.text);
    REQUIRE(out.status == 0);
    for (const char* png : {"val_ppl.png", "memory.png", "balance_loss.png", "train_loss.png"}) {
        INFO(png);
        const std::string bytes = read_file(dir + "/" + png);
        REQUIRE(bytes.size() > 1000);
        CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
    }
    Output bad =
        shell(std::string("/usr/bin/python3 ") + SKEW_SOURCE_DIR + "/tools/plot_metrics.py " + scratch("plots-empty"));
    CHECK(bad.status != 0);
    CHECK_THAT(bad.text, Catch::Contains("no metrics_*.json"));
}
