// `skew train` end to end on the faults of issue-style public bug reports, each an example of a kind:
// a top-1 router that gets no gradient, a diverged run whose derived values overflow, a NaN weight
// in a checkpoint, shards without a manifest replaced between stop and resume, a second writer on
// one run folder, a data hint proposing a value the schema refuses, a run stopped before its first
// evaluation, and a resume with no record of its data left.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "engine/dir_lock.h"
#include "engine/error.h"
#include "tests/cli_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

const std::string& work_dir() {
    static const std::string dir = [] {
        std::string d = (fs::temp_directory_path() / ("skew-reliability-test-" + std::to_string(getpid()))).string();
        fs::remove_all(d);
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

// Shards of the committed sample, prepared once per test process with `extra` prepare flags.
std::string prepare(const std::string& name, const std::string& extra = "") {
    const std::string out = work_dir() + "/" + name;
    if (fs::exists(out + "/manifest.json")) return out;
    const std::string src = SKEW_SOURCE_DIR;
    Run r = run("prepare --input " + src + "/tests/fixtures/train/sample.jsonl --out " + out + " --tokenizer " + src +
                "/tests/fixtures/data/gpt2 --no-progress " + extra);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
}

std::string train_args(const std::string& data, const std::string& extra) {
    return "train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --plain --set data.dir=" + data +
           " --set train.batch_size=4 --set train.microbatch=2 --set train.eval_batches=2 " + extra;
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

// The raw bytes of one tensor of a safetensors file.
std::string tensor_bytes(const std::string& path, const std::string& name) {
    const skew::SafetensorsHeader h = skew::read_safetensors_header(path);
    const skew::SafetensorsEntry* e = h.find(name);
    REQUIRE(e);
    std::ifstream in(path, std::ios::binary);
    in.seekg(h.data_start + e->begin);
    std::string out(size_t(e->end - e->begin), '\0');
    in.read(out.data(), std::streamsize(out.size()));
    return out;
}

}  // namespace

TEST_CASE("with top_k 1 and no aux losses the router still learns from the LM loss (the gate is the probability)") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/top1";
    const std::string args =
        "--set model.top_k=1 --set model.balance_loss_coef=0 --set model.z_loss_coef=0 "
        "--set train.steps=3 --set train.eval_every=3 --optimizers adamw --out " +
        d;
    Run first = run(train_args(data, args + " --stop-after 1"));
    INFO(first.output);
    REQUIRE(first.status == 0);
    CHECK(first.output.find("identically zero") == std::string::npos);
    const std::string model = d + "/checkpoints/adamw/last/model.safetensors";
    const std::string router_1 = tensor_bytes(model, "blocks.1.moe.router.weight");
    Run rest = run("train --plain --resume " + d);
    INFO(rest.output);
    REQUIRE(rest.status == 0);
    const std::string router_3 = tensor_bytes(model, "blocks.1.moe.router.weight");
    CHECK(router_3 != router_1);  // renormalized top-1 gates (p / p = 1) left it exactly unchanged
}

TEST_CASE("a diverged run keeps overflowed apart from missing, takes best from the loss and the report says diverged") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/diverged";
    Run r = run(train_args(data,
                           "--set optimizers.adamw.lr=5 --set model.init_std=10 --set train.grad_clip=0 "
                           "--set train.warmup_frac=0 --set train.steps=4 --set train.eval_every=2 "
                           "--set train.max_skipped_steps=100 --optimizers adamw --out " +
                               d));
    INFO(r.output);
    const json m = read_json(d + "/metrics_adamw.json");
    const json& last = m["history"].back();
    INFO(m.dump(1));
    REQUIRE(last["val_loss"].is_number());
    const double loss = last["val_loss"].get<double>();
    REQUIRE(loss > 50);                               // diverged: far above ln(50257) = 10.8
    if (loss > 709) CHECK(last["val_ppl"] == "inf");  // exp overflows a double: "inf", never null
    else CHECK(last["val_ppl"].get<double>() == Approx(std::exp(loss)).epsilon(1e-6));
    // best: the lowest finite validation loss, the step the best/ checkpoint holds.
    const json state = read_json(d + "/checkpoints/adamw/best/trainer_state.json");
    CHECK(m["summary"]["best_val_step"] == state["step"]);
    CHECK(m["summary"]["best_val_step"].get<int64_t>() > 0);
    // No 150-digit perplexity on the console: exponent form.
    CHECK(r.output.find(std::string(40, '0')) == std::string::npos);
    Run report = run("report " + d);
    INFO(report.output);
    CHECK(report.output.find("(diverged)") != std::string::npos);
}

TEST_CASE("a NaN weight in the checkpoint is refused on resume naming the tensor and element") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/nan-weight";
    REQUIRE(run(train_args(data, "--set train.steps=4 --set train.eval_every=2 --optimizers adamw --out " + d +
                                     " --stop-after 2"))
                .status == 0);
    const std::string model = d + "/checkpoints/adamw/last/model.safetensors";
    const skew::SafetensorsHeader h = skew::read_safetensors_header(model);
    const skew::SafetensorsEntry* e = h.find("final_ln.weight");
    REQUIRE(e);
    {
        std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(h.data_start + e->begin);
        if (e->dtype == skew::DType::BF16) f.write("\xc0\x7f", 2);
        else f.write("\x00\x00\xc0\x7f", 4);
    }
    Run r = run("train --plain --resume " + d);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("'final_ln.weight'") != std::string::npos);
    CHECK(r.output.find("(nan) at [0]") != std::string::npos);
    CHECK(r.output.find("grad.embed") == std::string::npos);  // not blamed on a gradient
}

TEST_CASE("every step skipped to the end of a run is an error, with the checkpoint and metrics written") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/skipped-end";
    Run r = run(train_args(
        data, "--set train.steps=2 --set train.eval_every=2 --optimizers adamw --out " + d + " --debug-inject-nan 2"));
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("ended with 1 step(s) skipped") != std::string::npos);
    CHECK(fs::exists(d + "/metrics_adamw.json"));
}

TEST_CASE("llm.c shards without a manifest replaced between stop and resume are refused naming the shard") {
    const std::string data = work_dir() + "/no-manifest";
    fs::remove_all(data);
    fs::copy(prepare("prep"), data, fs::copy_options::recursive);
    fs::remove(data + "/manifest.json");
    const std::string d = work_dir() + "/no-manifest-run";
    Run first = run(train_args(
        data, "--set train.steps=4 --set train.eval_every=2 --optimizers adamw --out " + d + " --stop-after 2"));
    INFO(first.output);
    REQUIRE(first.status == 0);
    REQUIRE(fs::exists(d + "/data_identity.json"));
    // Same size, one token changed: a replaced shard.
    std::string shard;
    for (const auto& e : fs::directory_iterator(data))
        if (e.path().filename().string().starts_with("train_")) shard = e.path().string();
    REQUIRE(!shard.empty());
    {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(1024 + 2 * 5);
        f.write("\x01\x00", 2);
    }
    Run resumed = run("train --plain --resume " + d);
    INFO(resumed.output);
    CHECK(resumed.status != 0);
    CHECK(resumed.output.find(fs::path(shard).filename().string()) != std::string::npos);
    CHECK(resumed.output.find("not the ones the run started with") != std::string::npos);
}

TEST_CASE("a second writer on a run folder is refused naming the folder and its lock") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/locked";
    REQUIRE(run(train_args(data, "--set train.steps=4 --set train.eval_every=2 --optimizers adamw --out " + d +
                                     " --stop-after 2"))
                .status == 0);
    {
        skew::DirLock held;  // as a running `skew train --resume` holds it
        skew::dir_lock(held, d, ".skew-train.lock", "skew train");
        Run second = run("train --plain --resume " + d);
        INFO(second.output);
        CHECK(second.status != 0);
        CHECK(second.output.find("another skew train is writing " + d) != std::string::npos);
        CHECK(fs::exists(d + "/checkpoints/adamw/last/trainer_state.json"));
    }
    Run after = run("train --plain --resume " + d);  // released: it resumes
    INFO(after.output);
    CHECK(after.status == 0);
    CHECK_FALSE(fs::exists(d + "/.skew-train.lock"));
}

TEST_CASE("data prepared with --val-ratio 0 is refused without proposing data.val_ratio: 0") {
    // `skew prepare` refuses --val-ratio 0 (tests/tools/test_user_errors.cpp); such a manifest can
    // still come from elsewhere (an older skew, a hand-made folder): made here from a normal one.
    const std::string data = prepare("prep-no-val");
    {
        json m = read_json(data + "/manifest.json");
        m["split"]["val_ratio"] = 0;
        m["split"]["train_buckets"] = 1000;
        std::ofstream(data + "/manifest.json") << m.dump(2) << "\n";
    }
    Run r = run(train_args(data, "--set train.steps=2 --optimizers adamw --out " + work_dir() + "/no-val"));
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.output.find("data.val_ratio: 0 ") == std::string::npos);
    CHECK(r.output.find("or set data.val_ratio") == std::string::npos);
    CHECK(r.output.find("--val-ratio 0.05") != std::string::npos);
    // A ratio the schema accepts is proposed, and passes `skew config`.
    const std::string other = prepare("prep-val-10", "--val-ratio 0.1");
    Run r10 = run(train_args(other, "--set train.steps=2 --optimizers adamw --out " + work_dir() + "/val-10"));
    INFO(r10.output);
    CHECK(r10.status != 0);
    REQUIRE(r10.output.find("or set data.val_ratio: 0.1") != std::string::npos);
    CHECK(run("config " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --set data.val_ratio=0.1").status == 0);
}

TEST_CASE("a run stopped on non-finite steps writes its metrics with where and why, and the report says it stopped") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/nan-stop";
    Run r = run(train_args(data,
                           "--set train.steps=6 --set train.eval_every=2 --set train.max_skipped_steps=0 "
                           "--optimizers adamw,lion --debug-inject-nan 5 --out " +
                               d));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("adamw: step 5: non-finite") != std::string::npos);
    REQUIRE(fs::exists(d + "/metrics_adamw.json"));  // before: no metrics file, and the report said "not run"
    const json m = read_json(d + "/metrics_adamw.json");
    CHECK(m["summary"]["steps"] == 4);
    CHECK(m["summary"]["stopped"]["step"] == 5);
    const std::string reason = m["summary"]["stopped"]["reason"].get<std::string>();
    CHECK(reason.rfind("non-finite grad norm (nan)", 0) == 0);
    CHECK(reason.find("exceed train.max_skipped_steps = 0") != std::string::npos);
    CHECK(m["history"].size() == 2);  // the step-2 and step-4 evaluations
    Run rep = run("report " + d);
    INFO(rep.output);
    REQUIRE(rep.status == 0);
    CHECK(rep.output.find("Stopped early: adamw stopped at step 5 (non-finite grad norm (nan)") != std::string::npos);
    CHECK(rep.output.find("its values are from the step-4 evaluation") != std::string::npos);
    CHECK(rep.output.find("| adamw | 4 / 6 (stopped at step 5) |") != std::string::npos);
    CHECK(rep.output.find("Not run (no metrics file): lion.") != std::string::npos);
    CHECK(rep.output.find("adamw | not run") == std::string::npos);
}

// A 4-step AdamW run stopped after step 2 in work_dir()/NAME whose config.yaml then has `from`
// replaced by `to` (as a user editing it between stop and resume); returns the run folder.
static std::string stopped_run_with_edited_config(const std::string& data, const std::string& name,
                                                  const std::string& from, const std::string& to) {
    const std::string d = work_dir() + "/" + name;
    Run first = run(train_args(data, "--set train.steps=4 --optimizers adamw --stop-after 2 --out " + d));
    INFO(first.output);
    REQUIRE(fs::exists(d + "/checkpoints/adamw/last/trainer_state.json"));
    std::string yaml;
    {
        std::ifstream in(d + "/config.yaml");
        yaml.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const size_t at = yaml.find(from);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, from.size(), to);
    std::ofstream(d + "/config.yaml") << yaml;
    return d;
}

TEST_CASE("resuming after config.yaml was edited says so and what to do, naming the file") {
    const std::string data = prepare("prep");
    const std::string d = stopped_run_with_edited_config(data, "edited-config", "  steps: 4\n", "  steps: 6\n");
    Run r = run("train --plain --resume " + d);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("the checkpoint was written under another config than " + d + "/config.yaml") !=
          std::string::npos);
    CHECK(r.output.find("was config.yaml edited after the run started") != std::string::npos);
}

TEST_CASE("a run stopped before its first evaluation logs 'no evaluation yet', as the report says, not a nan") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/no-eval-yet";
    Run r = run(
        train_args(data, "--set train.steps=4 --set train.eval_every=4 --optimizers adamw --stop-after 1 --out " + d));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("adamw: 1 steps, no evaluation yet (stopped; resume with skew train --resume " + d + ")") !=
          std::string::npos);
    CHECK(r.output.find("nan") == std::string::npos);
    CHECK(run("report " + d).output.find("adamw at step 1 (no evaluation yet)") != std::string::npos);
    // stopped after an evaluation: the value and the step it is from
    const std::string e = work_dir() + "/eval-then-stop";
    Run s = run(
        train_args(data, "--set train.steps=4 --set train.eval_every=2 --optimizers adamw --stop-after 3 --out " + e));
    INFO(s.output);
    REQUIRE(s.status == 0);
    CHECK(s.output.find("adamw: 3 steps, val ppl ") != std::string::npos);
    CHECK(s.output.find(" at the step-2 evaluation (stopped;") != std::string::npos);
    Run rest = run("train --plain --resume " + e);
    INFO(rest.output);
    REQUIRE(rest.status == 0);
    CHECK(rest.output.find("adamw: 4 steps, final val ppl ") != std::string::npos);
}

TEST_CASE(
    "a resume whose run folder lost both manifest.json and data_identity.json is refused: nothing can check the data") {
    const std::string data = prepare("prep");
    const std::string d = work_dir() + "/no-data-record";
    Run first = run(train_args(data, "--set train.steps=4 --optimizers adamw --stop-after 2 --out " + d));
    INFO(first.output);
    REQUIRE(first.status == 0);
    fs::remove(d + "/manifest.json");
    // with data_identity.json alone the shards are still checked: the resume goes on
    REQUIRE(fs::exists(d + "/data_identity.json"));
    const std::string kept = d + "-kept";
    fs::copy(d, kept, fs::copy_options::recursive);
    Run ok = run("train --plain --resume " + kept);
    INFO(ok.output);
    CHECK(ok.status == 0);
    fs::remove(d + "/data_identity.json");
    Run r = run("train --plain --resume " + d);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("--resume " + d + ": the run folder has neither manifest.json nor data_identity.json") !=
          std::string::npos);
    CHECK(r.output.find("skew cannot tell whether " + data + " still holds it") != std::string::npos);
}

TEST_CASE("resuming after a model key of config.yaml was edited names the key and both values, before any tensor") {
    const std::string data = prepare("prep");
    // the plan then has no embed.positions tensor
    const std::string d =
        stopped_run_with_edited_config(data, "edited-model", "  positions: learned\n", "  positions: rope\n");
    Run r = run("train --plain --resume " + d);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(d + "/config.yaml: model.positions is rope but the checkpoint " + d +
                        "/checkpoints/adamw/last was trained with learned") != std::string::npos);
    CHECK(r.output.find("missing tensor") == std::string::npos);
}
