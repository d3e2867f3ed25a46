// Run metrics: metrics_<optimizer>.json holds the fields the report and plots read, round-trips
// exactly, is written atomically; the per-step JSONL log survives an interruption and is trimmed to
// the checkpoint's step on resume.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "train/metrics.h"
#include "train_test_util.h"

using namespace skew;
using namespace train_test;
namespace fs = std::filesystem;

namespace {

EvalRecord eval_at(int64_t step, double ppl) {
    EvalRecord e;
    e.step = step;
    e.train_lm_loss = 5.0 + 1.0 / double(step);
    e.balance_loss = 0.0501;
    e.z_loss = 0.0003;
    e.aux_loss = e.balance_loss + e.z_loss;
    e.val_loss = std::log(ppl);
    e.val_ppl = ppl;
    e.val_balance_loss = 0.0502 + 1e-4 * double(step);
    e.tokens_per_sec = 1000.0 + double(step);
    e.peak_memory_bytes = 1000 * step;
    e.lr = 3e-4 / double(step);
    e.grad_norm = 0.7;
    return e;
}

StepRecord step_at(int64_t s) {
    StepRecord r;
    r.step = s;
    r.lr = 1e-4 * double(s);
    r.lm_loss = 10.0 / double(s);
    r.balance_loss = 0.05;
    r.z_loss = 1e-4;
    r.grad_norm = 1.0 / 3.0;
    r.tokens_per_sec = 12345.678;
    return r;
}

}  // namespace

TEST_CASE("metrics JSON carries the plan's analytic state, the history and the summary") {
    auto r = make_run("skewadam");
    RunMetrics m = make_run_metrics(r->cfg, *r->cfg.find_optimizer("skewadam"), r->plan);
    CHECK(m.optimizer == "skewadam");
    CHECK(m.type == "skewadam");
    CHECK(m.state_bytes == r->plan.state_bytes);
    CHECK(m.paper_state_bytes == r->plan.paper_state_bytes);
    CHECK(m.plan_peak_bytes == r->plan.peak_bytes);
    CHECK(m.config["model"]["d_model"] == 16);
    CHECK(m.config["train"]["optimizers"] == nlohmann::json({"skewadam", "adamw"}));
    CHECK(m.config["runtime"]["backend"] == "cpu");
    CHECK(m.config["optimizers"]["skewadam"]["lr"].is_number_float());

    add_eval(m, eval_at(10, 300.0));
    add_eval(m, eval_at(20, 200.0));
    add_eval(m, eval_at(30, 250.0));
    CHECK(m.peak_memory_bytes == 30000);
    RunTotals t{30, 1, 30 * 256, 12.0, 20.0};
    m.summary = summarize(m.history, t);
    CHECK(m.summary.final_val_ppl == 250.0);
    CHECK(m.summary.best_val_ppl == 200.0);
    CHECK(m.summary.best_val_step == 20);
    CHECK(m.summary.final_balance_loss == eval_at(30, 0).val_balance_loss);
    CHECK(m.summary.mean_tokens_per_sec == Approx(640.0));
    CHECK(m.summary.skipped_steps == 1);

    nlohmann::json j = metrics_to_json(m);
    for (const char* key :
         {"optimizer", "type", "config", "state_bytes", "state_gib", "paper_state_bytes", "paper_state_gib",
          "plan_peak_bytes", "peak_memory_bytes", "peak_memory_gib", "history", "summary"})
        CHECK(j.contains(key));
    for (const char* key : {"step", "train_lm_loss", "aux_loss", "balance_loss", "z_loss", "val_loss", "val_ppl",
                            "val_balance_loss", "tokens_per_sec", "peak_memory_bytes", "lr", "grad_norm"})
        CHECK(j["history"][0].contains(key));
    CHECK(j["state_gib"].get<double>() == double(r->plan.state_bytes) / GIB);
    CHECK(j["history"].size() == 3);
    // the CPU backend: the plan is the arena; no CUDA context to measure (null, not 0)
    CHECK(j["plan_bytes"] == r->plan.peak_bytes);
    CHECK(j["device_overhead_bytes"].is_null());
    CHECK(j["device_overhead_constant_bytes"].is_null());
}

TEST_CASE("metrics files carry the start-up measurement of the device overhead next to the plan's constant") {
    const std::string dir = scratch("metrics-overhead");
    RunMetrics m;
    m.optimizer = "skewadam";
    m.type = "skewadam";
    m.plan_peak_bytes = int64_t(17) << 30;
    m.device_overhead_bytes = int64_t(700) << 20;
    m.device_overhead_constant_bytes = int64_t(788) << 20;
    m.plan_bytes = m.plan_peak_bytes + m.device_overhead_constant_bytes;
    m.summary = summarize(m.history, RunTotals{});
    write_metrics(dir, m);
    auto raw = nlohmann::json::parse(read_file(RunFolder{dir}.metrics("skewadam")));
    CHECK(raw["device_overhead_bytes"] == int64_t(700) << 20);
    CHECK(raw["device_overhead_constant_bytes"] == int64_t(788) << 20);
    CHECK(raw["plan_bytes"] == (int64_t(17) << 30) + (int64_t(788) << 20));
    RunMetrics back = read_metrics(RunFolder{dir}.metrics("skewadam"));
    CHECK(back.device_overhead_bytes == m.device_overhead_bytes);
    CHECK(back.plan_bytes == m.plan_bytes);
    // a file written before these fields: plan_bytes is the arena, the overhead unmeasured
    raw.erase("plan_bytes");
    raw.erase("device_overhead_bytes");
    raw.erase("device_overhead_constant_bytes");
    RunMetrics old = metrics_from_json(raw, "old.json");
    CHECK(old.plan_bytes == old.plan_peak_bytes);
    CHECK(old.device_overhead_bytes == -1);
}

TEST_CASE("metrics files round-trip every number exactly, unmeasured values as null and overflowed as inf") {
    const std::string dir = scratch("metrics-roundtrip");
    RunMetrics m;
    m.optimizer = "lion";
    m.type = "lion";
    m.config = {{"train", {{"steps", 30}}}};
    m.state_bytes = 123456789;
    m.paper_state_bytes = 123456789;
    add_eval(m, eval_at(10, 1.0 / 3.0));
    EvalRecord e = eval_at(20, 2.0);
    e.val_balance_loss = NO_VALUE;  // not measured
    e.grad_norm = std::numeric_limits<double>::infinity();
    add_eval(m, e);
    m.summary = summarize(m.history, RunTotals{20, 0, 640, 0.0, 1.0});
    write_metrics(dir, m);
    const std::string path = RunFolder{dir}.metrics("lion");
    CHECK(fs::path(path).filename() == "metrics_lion.json");
    auto raw = nlohmann::json::parse(read_file(path));
    CHECK(raw["history"][1]["val_balance_loss"].is_null());
    CHECK(raw["history"][1]["grad_norm"] == "inf");          // overflowed, not "not measured"
    CHECK(raw["summary"]["mean_tokens_per_sec"].is_null());  // no training time recorded
    RunMetrics back = read_metrics(path);
    CHECK(metrics_to_json(back) == metrics_to_json(m));
    CHECK(back.history[0].val_ppl == 1.0 / 3.0);
    CHECK(std::isnan(back.history[1].val_balance_loss));
    // Nothing but the file itself in the run folder: the temporary was renamed.
    CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 1);
}

TEST_CASE("a metrics file with a missing key or bad JSON is refused naming the file and key") {
    const std::string dir = scratch("metrics-bad");
    const std::string path = dir + "/metrics_x.json";
    write_file(path, "{\"optimizer\": \"x\",");
    CHECK_THAT(error_of([&] { read_metrics(path); }), Catch::Contains(path) && Catch::Contains("not valid JSON"));
    RunMetrics m;
    m.optimizer = "x";
    add_eval(m, eval_at(10, 100));
    auto j = metrics_to_json(m);
    j["history"][0].erase("val_ppl");
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { read_metrics(path); }), Catch::Contains(path + ": history[0]: missing key 'val_ppl'"));
    j = metrics_to_json(m);
    j["summary"]["steps"] = "many";
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { read_metrics(path); }), Catch::Contains("summary: 'steps' must be an integer"));
    for (const char* key : {"steps", "skipped_steps", "total_tokens"}) {
        j = metrics_to_json(m);
        j["summary"][key] = INT64_MIN;
        write_file(path, j.dump());
        CHECK_THAT(error_of([&] { read_metrics(path); }),
                   Catch::Contains("summary: 'steps', 'skipped_steps' and 'total_tokens' must be >= 0"));
    }
    j = metrics_to_json(m);
    j["summary"]["steps"] = uint64_t(1) << 63;  // above int64: refused, not wrapped to a negative count
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { read_metrics(path); }),
               Catch::Contains("'steps' must be an integer, got 9223372036854775808"));
    CHECK_THAT(error_of([&] { read_metrics(dir + "/absent.json"); }), Catch::Contains("absent.json: cannot open"));
}

TEST_CASE("a run stopped on a fault records where and why in summary.stopped, read back exactly, others have none") {
    const std::string dir = scratch("metrics-stopped");
    RunMetrics m;
    m.optimizer = "adamw";
    m.type = "adamw";
    add_eval(m, eval_at(10, 100));
    m.summary = summarize(m.history, RunTotals{12, 1, 640, 1.0, 2.0});
    CHECK_FALSE(metrics_to_json(m)["summary"].contains("stopped"));  // a run that did not stop on a fault
    m.summary.stopped_at_step = 13;
    m.summary.stop_reason = "non-finite loss (nan); stopping";
    write_metrics(dir, m);
    const auto raw = nlohmann::json::parse(read_file(RunFolder{dir}.metrics("adamw")));
    CHECK(raw["summary"]["stopped"]["step"] == 13);
    CHECK(raw["summary"]["stopped"]["reason"] == "non-finite loss (nan); stopping");
    const RunMetrics back = read_metrics(RunFolder{dir}.metrics("adamw"));
    CHECK(back.summary.stopped_at_step == 13);
    CHECK(back.summary.stop_reason == m.summary.stop_reason);
    auto j = raw;
    j["summary"]["stopped"] = "yes";
    const std::string path = dir + "/metrics_bad.json";
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { read_metrics(path); }), Catch::Contains(path + ": summary: stopped must be an object"));
    j["summary"]["stopped"] = {{"step", 0}, {"reason", "x"}};
    write_file(path, j.dump());
    CHECK_THAT(error_of([&] { read_metrics(path); }), Catch::Contains("'step' must be at least 1, got 0"));
}

TEST_CASE("a resume drops the evaluations after the checkpoint's step") {
    RunMetrics m;
    add_eval(m, eval_at(10, 300));
    add_eval(m, eval_at(20, 200));
    add_eval(m, eval_at(30, 100));
    truncate_history(m, 20);
    REQUIRE(m.history.size() == 2);
    CHECK(m.history.back().step == 20);
    CHECK(m.peak_memory_bytes == 20000);
}

TEST_CASE("the step log holds one JSON object per step with the documented fields") {
    const std::string dir = scratch("steplog");
    const std::string path = RunFolder{dir}.step_log("adamw");
    CHECK(fs::path(path).filename() == "steps_adamw.jsonl");
    {
        StepLog log = open_step_log(path, 0);
        for (int64_t s = 1; s <= 3; ++s) append_step(log, step_at(s));
        StepRecord skipped = step_at(4);
        skipped.lm_loss = NO_VALUE;
        skipped.grad_norm = NO_VALUE;
        skipped.skipped = true;
        append_step(log, skipped);
        sync_step_log(log);
    }
    std::string text = read_file(path);
    CHECK(std::count(text.begin(), text.end(), '\n') == 4);
    auto first = nlohmann::json::parse(text.substr(0, text.find('\n')));
    for (const char* key :
         {"step", "lr", "lm_loss", "balance_loss", "z_loss", "grad_norm", "tokens_per_sec", "skipped"})
        CHECK(first.contains(key));
    auto recs = read_step_log(path);
    REQUIRE(recs.size() == 4);
    CHECK(recs[1].lr == step_at(2).lr);
    CHECK(recs[2].grad_norm == 1.0 / 3.0);
    CHECK(recs[3].skipped);
    CHECK(std::isnan(recs[3].lm_loss));
}

TEST_CASE("an interrupted step log loses only its partial last line and resumes at the checkpoint") {
    const std::string dir = scratch("steplog-resume");
    const std::string path = RunFolder{dir}.step_log("muon");
    {
        StepLog log = open_step_log(path, 0);
        for (int64_t s = 1; s <= 7; ++s) append_step(log, step_at(s));
    }
    // The process died in the middle of writing step 8's line.
    std::string line8 = step_record_to_json(step_at(8)).dump();
    write_file(path, read_file(path) + line8.substr(0, line8.size() / 2));
    auto recs = read_step_log(path);
    CHECK(recs.size() == 7);
    // Resume from the checkpoint at step 5: steps 6 and 7 will be run again.
    {
        StepLog log = open_step_log(path, 5);
        for (int64_t s = 6; s <= 8; ++s) append_step(log, step_at(s));
    }
    recs = read_step_log(path);
    REQUIRE(recs.size() == 8);
    for (int64_t i = 0; i < 8; ++i) CHECK(recs[size_t(i)].step == i + 1);
    // The resumed log is byte-identical to an uninterrupted one.
    const std::string clean = dir + "/clean.jsonl";
    {
        StepLog log = open_step_log(clean, 0);
        for (int64_t s = 1; s <= 8; ++s) append_step(log, step_at(s));
    }
    CHECK(read_file(path) == read_file(clean));
    // A new run (keep_through 0) starts the log afresh.
    { StepLog log = open_step_log(path, 0); }
    CHECK(read_file(path).empty());
}

TEST_CASE("a corrupt complete line in the step log is refused naming the file and line") {
    const std::string dir = scratch("steplog-bad");
    const std::string path = dir + "/steps_x.jsonl";
    write_file(path, step_record_to_json(step_at(1)).dump() + "\n{not json}\n");
    CHECK_THAT(error_of([&] { read_step_log(path); }), Catch::Contains(path + ":2: not valid JSON"));
    CHECK_THAT(error_of([&] { open_step_log(path, 5); }), Catch::Contains(path + ":2"));
}

TEST_CASE("the resolved config converts to typed JSON") {
    auto j = config_to_json("a:\n  i: 42\n  f: 0.0003\n  e: 1e-08\n  b: true\n  s: runs/x\n  q: \"7\"\n  l: [x, y]\n");
    CHECK(j["a"]["i"] == 42);
    CHECK(j["a"]["f"] == 0.0003);
    CHECK(j["a"]["e"] == 1e-08);
    CHECK(j["a"]["b"] == true);
    CHECK(j["a"]["s"] == "runs/x");
    CHECK(j["a"]["q"] == "7");
    CHECK(j["a"]["l"] == nlohmann::json({"x", "y"}));
    CHECK_THROWS_AS(config_to_json("a: [1, 2"), Error);
}

TEST_CASE("the process's peak resident memory is measured and covers memory it touched") {
    const int64_t before = process_peak_rss_bytes();
    CHECK(before > 0);
    std::vector<char> big(size_t(96) << 20);
    std::memset(big.data(), 1, big.size());
    CHECK(process_peak_rss_bytes() >= int64_t(96) << 20);
    CHECK(process_peak_rss_bytes() >= before);
    CHECK(big[12345] == 1);
}
