// `skew train` end to end on committed real text (tests/fixtures/train/sample.jsonl): the loss
// falls, metrics are complete, every optimizer starts from the same weights on the same batches,
// an interrupted-and-resumed run equals an uninterrupted one, a corrupt checkpoint is refused and
// a NaN in a gradient is caught, reported and skipped.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/cli_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

const std::string& work_dir() {
    static const std::string dir = [] {
        std::string d = (fs::temp_directory_path() / ("skew-trainer-test-" + std::to_string(getpid()))).string();
        fs::remove_all(d);
        fs::create_directories(d);
        return d;
    }();
    return dir;
}

// Shards of the committed sample, prepared once per test process.
const std::string& prepared() {
    static const std::string dir = [] {
        std::string out = work_dir() + "/prep";
        std::string src = std::string(SKEW_SOURCE_DIR);
        Run r = run("prepare --input " + src + "/tests/fixtures/train/sample.jsonl --out " + out + " --tokenizer " + src +
                    "/tests/fixtures/data/gpt2 --no-progress");
        INFO(r.output);
        REQUIRE(r.status == 0);
        return out;
    }();
    return dir;
}

std::string train_args(const std::string& extra) {
    return "train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --plain --set data.dir=" + prepared() +
           " --set train.batch_size=4 --set train.microbatch=2 --set train.eval_batches=2 " + extra;
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

std::vector<json> read_jsonl(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    std::vector<json> out;
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) out.push_back(json::parse(line));
    return out;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("a short run on real text: loss falls, metrics complete, one initialization and one batch order") {
    const std::string out = work_dir() + "/short";
    Run r = run(train_args("--set train.steps=12 --set train.eval_every=6 --set optimizers.skewadam.lr=3e-3 "
                           "--set optimizers.adamw.lr=3e-3 --optimizers skewadam,adamw,lion,muon --out " + out));
    INFO(r.output);
    REQUIRE(r.status == 0);
    double first_loss = -1;
    for (std::string opt : {"skewadam", "adamw", "lion", "muon"}) {
        json m = read_json(out + "/metrics_" + opt + ".json");
        REQUIRE(m["history"].size() == 2);
        for (auto& h : m["history"]) {
            for (const char* key : {"step", "train_lm_loss", "aux_loss", "val_loss", "val_ppl", "tokens_per_sec",
                                    "peak_memory_bytes", "lr"})
                CHECK(!h[key].is_null());
            CHECK(h["val_ppl"].get<double>() == Approx(std::exp(h["val_loss"].get<double>())).epsilon(1e-9));
        }
        CHECK(m["state_bytes"].get<int64_t>() > 0);
        auto steps = read_jsonl(out + "/steps_" + opt + ".jsonl");
        REQUIRE(steps.size() == 12);
        // Same initialization and the same first batch: the first forward loss is identical.
        if (first_loss < 0) first_loss = steps[0]["lm_loss"].get<double>();
        CHECK(steps[0]["lm_loss"].get<double>() == first_loss);
        // Phase times: non-negative and adding up to the step's wall time (the optimizer's is the rest).
        for (auto& st : steps) {
            const double step_ms = st["step_ms"].get<double>();
            CHECK(step_ms > 0);
            CHECK(st["fwd_bwd_ms"].get<double>() > 0);
            CHECK(st["grad_norm_ms"].get<double>() >= 0);
            CHECK(st["optimizer_ms"].get<double>() >= 0);
            CHECK(st["fwd_bwd_ms"].get<double>() + st["grad_norm_ms"].get<double>() + st["optimizer_ms"].get<double>() ==
                  Approx(step_ms).epsilon(1e-6));
            CHECK(st["tokens_per_sec"].get<double>() == Approx(4 * 32 / (step_ms / 1e3)).epsilon(1e-6));
        }
    }
    json s = read_json(out + "/metrics_skewadam.json");
    const double v6 = s["history"][0]["val_loss"].get<double>(), v12 = s["history"][1]["val_loss"].get<double>();
    CHECK(v12 < v6);
    auto steps = read_jsonl(out + "/steps_skewadam.jsonl");
    CHECK(steps.back()["lm_loss"].get<double>() < steps.front()["lm_loss"].get<double>() - 0.2);
    CHECK(fs::exists(out + "/config.yaml"));
    CHECK(fs::exists(out + "/manifest.json"));
    CHECK(fs::exists(out + "/checkpoints/skewadam/last/model.safetensors"));
    CHECK(fs::exists(out + "/checkpoints/muon/best/optimizer.safetensors"));
}

TEST_CASE("train.microbatch 0 takes the largest divisor of the batch that fits the host: the whole batch here") {
    const std::string out = work_dir() + "/auto_mb";
    Run r = run(train_args("--set train.microbatch=0 --set train.steps=2 --set train.eval_every=2 --optimizers skewadam "
                           "--out " + out));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("train.microbatch 0: 4 sequences, the largest divisor of batch_size 4") != std::string::npos);
    CHECK(r.output.find("microbatch 4 x 32 tokens, 1 accumulation steps") != std::string::npos);
}

TEST_CASE("interrupted at step k and resumed equals uninterrupted, bit for bit on the CPU") {
    const std::string a = work_dir() + "/uninterrupted", b = work_dir() + "/interrupted";
    const std::string common = "--set train.steps=6 --set train.eval_every=2 --set train.checkpoint_every=100 "
                               "--optimizers skewadam,adamw ";
    REQUIRE(run(train_args(common + "--out " + a)).status == 0);
    Run stop = run(train_args(common + "--out " + b + " --stop-after 3"));
    INFO(stop.output);
    REQUIRE(stop.status == 0);
    CHECK(read_jsonl(b + "/steps_skewadam.jsonl").size() == 3);
    CHECK_FALSE(fs::exists(b + "/metrics_adamw.json"));
    Run resume = run("train --plain --resume " + b);
    INFO(resume.output);
    REQUIRE(resume.status == 0);
    for (std::string opt : {"skewadam", "adamw"}) {
        auto sa = read_jsonl(a + "/steps_" + opt + ".jsonl"), sb = read_jsonl(b + "/steps_" + opt + ".jsonl");
        REQUIRE(sa.size() == sb.size());
        for (size_t i = 0; i < sa.size(); ++i)
            for (const char* key : {"step", "lr", "lm_loss", "balance_loss", "z_loss", "grad_norm", "skipped"})
                CHECK(sa[i][key] == sb[i][key]);
        json ma = read_json(a + "/metrics_" + opt + ".json"), mb = read_json(b + "/metrics_" + opt + ".json");
        REQUIRE(ma["history"].size() == mb["history"].size());
        for (size_t i = 0; i < ma["history"].size(); ++i)
            for (const char* key : {"step", "train_lm_loss", "aux_loss", "val_loss", "val_ppl", "lr", "grad_norm"})
                CHECK(ma["history"][i][key] == mb["history"][i][key]);
        CHECK(read_bytes(a + "/checkpoints/" + opt + "/last/model.safetensors") ==
              read_bytes(b + "/checkpoints/" + opt + "/last/model.safetensors"));
        CHECK(read_bytes(a + "/checkpoints/" + opt + "/last/optimizer.safetensors") ==
              read_bytes(b + "/checkpoints/" + opt + "/last/optimizer.safetensors"));
    }
}

TEST_CASE("a truncated checkpoint is refused on resume with a message naming the file") {
    const std::string d = work_dir() + "/corrupt";
    REQUIRE(run(train_args("--set train.steps=4 --set train.eval_every=2 --optimizers skewadam --out " + d +
                           " --stop-after 2")).status == 0);
    const std::string model = d + "/checkpoints/skewadam/last/model.safetensors";
    REQUIRE(fs::exists(model));
    fs::resize_file(model, fs::file_size(model) / 2);
    Run r = run("train --plain --resume " + d);
    CHECK(r.status == 1);
    CHECK(r.output.find("model.safetensors") != std::string::npos);
    CHECK(r.output.find("skew: error:") != std::string::npos);
}

TEST_CASE("a NaN injected into a gradient is caught, reported with the tensor and the step, and skipped") {
    const std::string d = work_dir() + "/nan";
    Run r = run(train_args("--set train.steps=4 --set train.eval_every=2 --optimizers skewadam --out " + d +
                           " --debug-inject-nan 2"));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("step 2: non-finite") != std::string::npos);
    CHECK(r.output.find("[warning] skewadam: step 2: non-finite") != std::string::npos);  // a warning, not info
    CHECK(r.output.find("[info] skewadam: step 2: non-finite") == std::string::npos);
    CHECK(r.output.find("grad.blocks.1.moe.router.weight") != std::string::npos);
    auto steps = read_jsonl(d + "/steps_skewadam.jsonl");
    REQUIRE(steps.size() == 4);
    CHECK(steps[1]["skipped"] == true);
    CHECK(steps[0]["skipped"] == false);
    CHECK(steps[2]["skipped"] == false);
    // Past train.max_skipped_steps the run stops with an error and a checkpoint.
    Run stop = run(train_args("--set train.steps=4 --set train.max_skipped_steps=0 --optimizers skewadam --out " + d +
                              "-stop --debug-inject-nan 2"));
    CHECK(stop.status == 1);
    CHECK(stop.output.find("stopped with the checkpoint of step 1") != std::string::npos);
}

TEST_CASE("a run folder is never clobbered: reuse, changed settings and lost checkpoints are refused") {
    const std::string d = work_dir() + "/guard";
    REQUIRE(run(train_args("--set train.steps=4 --set train.eval_every=2 --optimizers skewadam --out " + d +
                           " --stop-after 2")).status == 0);
    const std::string config_before = read_bytes(d + "/config.yaml");
    Run again = run(train_args("--set train.steps=4 --optimizers skewadam --out " + d));
    CHECK(again.status == 1);
    CHECK(again.output.find("already holds a run") != std::string::npos);
    Run changed = run("train --plain --resume " + d + " --set train.steps=500");
    CHECK(changed.status == 1);
    CHECK(changed.output.find("--set and --optimizers are not allowed") != std::string::npos);
    CHECK(read_bytes(d + "/config.yaml") == config_before);
    fs::remove_all(d + "/checkpoints");
    Run lost = run("train --plain --resume " + d);
    CHECK(lost.status == 1);
    CHECK(lost.output.find("no complete checkpoint") != std::string::npos);
    CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 2);
}

TEST_CASE("bad train inputs are refused with a message") {
    CHECK(run("train --resume /nonexistent-run").output.find("no config.yaml there") != std::string::npos);
    Run r = run(train_args("--set data.dir=/nonexistent-data --out " + work_dir() + "/bad"));
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent-data") != std::string::npos);
    Run big = run(train_args("--set train.eval_batches=1000 --set train.steps=1 --optimizers skewadam --out " + work_dir() +
                             "/big"));
    CHECK_FALSE(fs::exists(work_dir() + "/big"));  // refused before the run folder is made
    CHECK(run(train_args("--optimizers '' --out " + work_dir() + "/none")).status == 1);
    // Out of budget: the paper's model with 8,192 experts (about 5 TB of AdamW run) fits no host;
    // refused before anything is allocated, saying what the plan holds.
    Run huge = run(train_args("--set model.d_model=4096 --set model.n_heads=32 --set model.n_kv_heads=8 "
                              "--set model.n_experts=8192 --set model.d_expert=4096 --set model.d_ff=4096 "
                              "--set model.max_seq_len=256 --optimizers adamw --out " + work_dir() + "/huge"));
    CHECK(huge.status == 1);
    CHECK(huge.output.find("GiB available") != std::string::npos);
    CHECK(huge.output.find("optimizer state") != std::string::npos);
    CHECK_FALSE(fs::exists(work_dir() + "/huge/metrics_adamw.json"));
    CHECK(big.status == 1);
    CHECK(big.output.find("train.eval_batches") != std::string::npos);
    CHECK(big.output.find("1000") != std::string::npos);
    // GPT-2 token ids for a 1,000-token model: refused from the manifest before the run starts;
    // without a manifest (llm.c shards) the step that meets the token names itself.
    const std::string small_vocab = "--set model.vocab_size=1000 --set model.padded_vocab_size=1024 --optimizers skewadam ";
    Run vocab = run(train_args(small_vocab + "--out " + work_dir() + "/vocab"));
    CHECK(vocab.status == 1);
    CHECK(vocab.output.find("50257-token vocabulary") != std::string::npos);
    CHECK_FALSE(fs::exists(work_dir() + "/vocab"));
    const std::string bare = work_dir() + "/bare-shards";
    fs::create_directories(bare);
    for (const auto& e : fs::directory_iterator(prepared()))
        if (e.path().extension() == ".bin") fs::copy_file(e.path(), bare + "/" + e.path().filename().string());
    Run step = run(train_args(small_vocab + "--set data.dir=" + bare + " --out " + work_dir() + "/vocab-step"));
    INFO(step.output);
    CHECK(step.status == 1);
    CHECK(step.output.find("skewadam: step 1 (forward/backward): model: token") != std::string::npos);
}
