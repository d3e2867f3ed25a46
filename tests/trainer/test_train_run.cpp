// `skew train` end to end on committed real text (tests/fixtures/train/sample.jsonl): the loss
// falls, metrics are complete, every optimizer starts from the same weights on the same batches,
// an interrupted-and-resumed run equals an uninterrupted one, a corrupt checkpoint is refused and
// a NaN in a gradient is caught, reported and skipped; the OpenBLAS core skew picks gives the generic
// core's step.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/cpu/blas_core.h"
#include "tests/cli_util.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

const std::string& work_dir() {
    static const std::string dir = [] {
        std::string d = (skew::test::test_temp_root() / ("skew-trainer-test-" + std::to_string(getpid()))).string();
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
        Run r = run("prepare --input " + src + "/tests/fixtures/train/sample.jsonl --out " + out + " --tokenizer " +
                    src + "/tests/fixtures/data/gpt2 --no-progress");
        INFO(r.output);
        REQUIRE(r.status == 0);
        return out;
    }();
    return dir;
}

// Run `skew <args>` with `dir` as the current directory.
Run run_in(const std::string& dir, const std::string& args) { return skew::test::run_skew(args, dir); }

// A copy of the prepared shards and manifest, to change without touching the shared ones.
std::string copy_prepared(const std::string& name) {
    const std::string dir = work_dir() + "/" + name;
    fs::remove_all(dir);
    fs::copy(prepared(), dir, fs::copy_options::recursive);
    return dir;
}

// Overwrite token `offset` of a shard (after its 1024-byte header) with id `token`.
void poke_token(const std::string& shard, int64_t offset, uint16_t token) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f.good());
    f.seekp(1024 + 2 * offset);
    f.write(reinterpret_cast<const char*>(&token), 2);
    REQUIRE(f.good());
}

bool empty_dir(const std::string& dir) { return fs::is_directory(dir) && fs::is_empty(dir); }

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
    const auto wall_start = std::chrono::steady_clock::now();
    Run r =
        run(train_args("--set train.steps=12 --set train.eval_every=6 --set optimizers.skewadam.lr=3e-3 "
                       "--set optimizers.adamw.lr=3e-3 --optimizers skewadam,adamw,lion,muon --out " +
                       out));
    // the test's own clock around the whole process: an upper bound on every step time the run reports
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start).count();
    double steps_ms_total = 0;
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
        // Phase times: positive and each within the step; the steps of all optimizers together fit in
        // the wall time the test measured around the process (optimizer_ms is the step's remainder by
        // definition, so the sum of the phases is not checked against step_ms: that would be a tautology).
        for (auto& st : steps) {
            const double step_ms = st["step_ms"].get<double>();
            CHECK(step_ms > 0);
            CHECK(st["fwd_bwd_ms"].get<double>() > 0);
            CHECK(st["grad_norm_ms"].get<double>() >= 0);
            CHECK(st["optimizer_ms"].get<double>() > 0);  // an update of every parameter takes time
            CHECK(st["fwd_bwd_ms"].get<double>() < step_ms);
            CHECK(st["optimizer_ms"].get<double>() < step_ms);
            CHECK(st["tokens_per_sec"].get<double>() == Approx(4 * 32 / (step_ms / 1e3)).epsilon(1e-6));
            steps_ms_total += step_ms;
        }
    }
    INFO("sum of step_ms " << steps_ms_total << ", wall time of the process " << wall_ms);
    CHECK(steps_ms_total < wall_ms);
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
    Run r =
        run(train_args("--set train.microbatch=0 --set train.steps=2 --set train.eval_every=2 --optimizers skewadam "
                       "--out " +
                       out));
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("train.microbatch 0: 4 sequences, the largest divisor of batch_size 4") != std::string::npos);
    CHECK(r.output.find("microbatch 4 x 32 tokens, 1 accumulation steps") != std::string::npos);
}

TEST_CASE("interrupted at step k and resumed equals uninterrupted, bit for bit on the CPU") {
    const std::string a = work_dir() + "/uninterrupted", b = work_dir() + "/interrupted";
    const std::string common =
        "--set train.steps=6 --set train.eval_every=2 --set train.checkpoint_every=100 "
        "--optimizers skewadam,adamw,lion,muon,adafactor,galore,galore-paper ";
    REQUIRE(run(train_args(common + "--out " + a)).status == 0);
    Run stop = run(train_args(common + "--out " + b + " --stop-after 3"));
    INFO(stop.output);
    REQUIRE(stop.status == 0);
    CHECK(read_jsonl(b + "/steps_skewadam.jsonl").size() == 3);
    CHECK_FALSE(fs::exists(b + "/metrics_adamw.json"));
    Run resume = run("train --plain --resume " + b);
    INFO(resume.output);
    REQUIRE(resume.status == 0);
    for (std::string opt : {"skewadam", "adamw", "lion", "muon", "adafactor", "galore", "galore-paper"}) {
        INFO("optimizer " << opt);
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
                           " --stop-after 2"))
                .status == 0);
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
    CHECK(steps[1]["optimizer_ms"].is_null());  // no update: no optimizer time (docs/training.md)
    CHECK(steps[2]["optimizer_ms"].get<double>() >= 0);
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
                           " --stop-after 2"))
                .status == 0);
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
    CHECK(lost.output.find("(to do that, remove ") != std::string::npos);
    CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 2);
}

TEST_CASE("a run killed before its first checkpoint and evaluation resumes by training again from step 1") {
    const std::string d = work_dir() + "/killed-early";
    const std::string args =
        "--set train.steps=4 --set train.eval_every=4 --set train.checkpoint_every=100 "
        "--optimizers skewadam --out " +
        d;
    REQUIRE(run(train_args(args + " --stop-after 2")).status == 0);
    const auto first = read_jsonl(d + "/steps_skewadam.jsonl");
    REQUIRE(first.size() == 2);
    // what a second Ctrl-C or kill -9 before step 100 leaves: the step log, no checkpoint, no metrics
    fs::remove_all(d + "/checkpoints");
    fs::remove(d + "/metrics_skewadam.json");  // a clean stop writes it; a kill leaves none
    Run again = run("train --plain --resume " + d);
    INFO(again.output);
    REQUIRE(again.status == 0);
    CHECK(again.output.find("stopped before its first checkpoint (2 logged steps); training it again from step 1") !=
          std::string::npos);
    const auto steps = read_jsonl(d + "/steps_skewadam.jsonl");
    REQUIRE(steps.size() == 4);
    for (size_t i = 0; i < 2; ++i) CHECK(steps[i]["lm_loss"] == first[i]["lm_loss"]);  // the same steps again
    CHECK(run(train_args("--set train.steps=4 --stop-after 0 --out " + work_dir() + "/stop0")).status == 2);
}

TEST_CASE("bad train inputs are refused with a message") {
    CHECK(run("train --resume /nonexistent-run").output.find("no config.yaml there") != std::string::npos);
    Run r = run(train_args("--set data.dir=/nonexistent-data --out " + work_dir() + "/bad"));
    CHECK(r.status == 1);
    CHECK(r.output.find("/nonexistent-data") != std::string::npos);
    Run big = run(train_args("--set train.eval_batches=1000 --set train.steps=1 --optimizers skewadam --out " +
                             work_dir() + "/big"));
    CHECK_FALSE(fs::exists(work_dir() + "/big"));  // refused before the run folder is made
    CHECK(run(train_args("--optimizers '' --out " + work_dir() + "/none")).status == 1);
    // Out of budget: the paper's model with 8,192 experts (about 5 TB of AdamW run) fits no host;
    // refused before anything is allocated, saying what the plan holds.
    Run huge =
        run(train_args("--set model.d_model=4096 --set model.n_heads=32 --set model.n_kv_heads=8 "
                       "--set model.n_experts=8192 --set model.d_expert=4096 --set model.d_ff=4096 "
                       "--set model.max_seq_len=256 --optimizers adamw --out " +
                       work_dir() + "/huge"));
    CHECK(huge.status == 1);
    CHECK(huge.output.find("GiB available") != std::string::npos);
    CHECK(huge.output.find("optimizer state") != std::string::npos);
    CHECK_FALSE(fs::exists(work_dir() + "/huge"));  // refused before the run folder is made
    CHECK(big.status == 1);
    CHECK(big.output.find("train.eval_batches") != std::string::npos);
    CHECK(big.output.find("1000") != std::string::npos);
    // GPT-2 token ids for a 1,000-token model: refused from the manifest before the run starts;
    // without a manifest (llm.c shards) the startup pass over the tokens names the shard and offset.
    const std::string small_vocab =
        "--set model.vocab_size=1000 --set model.padded_vocab_size=1024 --optimizers skewadam ";
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
    CHECK(step.output.find("data: split train: token id ") != std::string::npos);
    CHECK(step.output.find("of shard " + bare + "/train_000000.bin") != std::string::npos);
    CHECK(step.output.find("(model.vocab_size 1000)") != std::string::npos);
    CHECK_FALSE(fs::exists(work_dir() + "/vocab-step"));
}

TEST_CASE("resume refuses data that changed since the run started, naming both manifests and the first difference") {
    const std::string data = copy_prepared("resume-data"), d = work_dir() + "/resume-data-run";
    const std::string common =
        "--set data.dir=" + data + " --set train.steps=4 --set train.eval_every=2 --optimizers skewadam ";
    REQUIRE(run(train_args(common + "--out " + d + " --stop-after 2")).status == 0);
    const std::string manifest = data + "/manifest.json";
    const std::string original = read_bytes(manifest);
    json m = json::parse(original);
    REQUIRE(m["shards"].size() >= 2);
    const std::string md5 = m["shards"][0]["md5"].get<std::string>();
    m["shards"][0]["md5"] = "00000000000000000000000000000000";  // another shard under the same name
    std::ofstream(manifest) << m.dump(2);
    Run changed = run("train --plain --resume " + d);
    INFO(changed.output);
    CHECK(changed.status == 1);
    CHECK(changed.output.find("the data changed since the run started: " + manifest + " differs from the run's copy " +
                              d + "/manifest.json") != std::string::npos);
    CHECK(changed.output.find("shard 1 (\"train_000000.bin\"): md5 \"" + md5 +
                              "\" in the run's copy, \"00000000000000000000000000000000\" now") != std::string::npos);
    m = json::parse(original);
    m["shards"].erase(m["shards"].size() - 1);  // one shard fewer
    std::ofstream(manifest) << m.dump(2);
    Run fewer = run("train --plain --resume " + d);
    CHECK(fewer.status == 1);
    CHECK(fewer.output.find("shards in the run's copy, " + std::to_string(m["shards"].size()) + " now") !=
          std::string::npos);
    fs::remove(manifest);
    Run none = run("train --plain --resume " + d);
    CHECK(none.status == 1);
    CHECK(none.output.find("the run was started on the data of " + d + "/manifest.json, but " + manifest +
                           " has none") != std::string::npos);
    CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 2);  // nothing ran
    // A shard edited in place under an unchanged manifest: re-hashed (the shards are small) and refused.
    std::ofstream(manifest) << original;
    const std::string shard = data + "/train_000000.bin", shard_bytes = read_bytes(shard);
    std::string edited = shard_bytes;
    edited[2000] = char(edited[2000] ^ 1);
    std::ofstream(shard, std::ios::binary) << edited;
    Run in_place = run("train --plain --resume " + d);
    INFO(in_place.output);
    CHECK(in_place.status == 1);
    CHECK(in_place.output.find("shard " + shard + " changed since the run started (MD5 ") != std::string::npos);
    std::ofstream(shard, std::ios::binary) << shard_bytes;
    // Timing fields are not the data: the same shards with another "seconds" resume.
    m = json::parse(original);
    m["seconds"] = m["seconds"].get<double>() + 100;
    std::ofstream(manifest) << m.dump(2);
    Run same = run("train --plain --resume " + d);
    INFO(same.output);
    CHECK(same.status == 0);
    CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 4);
}

TEST_CASE("a relative data.dir on resume from another directory says so and names the current directory") {
    const std::string base = work_dir() + "/relative";
    fs::create_directories(base);
    fs::remove_all(base + "/data");
    fs::copy(prepared(), base + "/data", fs::copy_options::recursive);
    const std::string args =
        "train " + std::string(SKEW_SOURCE_DIR) +
        "/configs/tiny.yaml --plain --set data.dir=data "
        "--set train.batch_size=4 --set train.microbatch=2 --set train.eval_batches=2 "
        "--set train.steps=4 --set train.eval_every=2 --optimizers skewadam --out run --stop-after 2";
    Run start = run_in(base, args);
    INFO(start.output);
    REQUIRE(start.status == 0);
    Run elsewhere = run_in(work_dir(), "train --plain --resume " + base + "/run");
    INFO(elsewhere.output);
    CHECK(elsewhere.status == 1);
    CHECK(elsewhere.output.find("data.dir data is relative to the current directory (" + work_dir() +
                                ") and does not exist there; resume the run from the directory it was started in") !=
          std::string::npos);
    Run here = run_in(base, "train --plain --resume run");
    INFO(here.output);
    CHECK(here.status == 0);
    CHECK(read_jsonl(base + "/run/steps_skewadam.jsonl").size() == 4);
}

TEST_CASE("a token id past model.vocab_size is refused at startup naming the split, the shard and the offset") {
    const std::string data = copy_prepared("bad-token");
    poke_token(data + "/train_000000.bin", 7, 65535);
    const std::string d = work_dir() + "/bad-token-run";
    Run r = run(train_args("--set data.dir=" + data + " --set train.steps=2 --optimizers skewadam --out " + d));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("data: split train: token id 65535 at offset 7 of shard " + data +
                        "/train_000000.bin (byte 1038) is outside the model's vocabulary (model.vocab_size 50257)") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(d));  // before the run folder is made
    const std::string val = copy_prepared("bad-val-token");
    poke_token(val + "/val_000000.bin", 3, 60000);
    Run v = run(train_args("--set data.dir=" + val + " --set train.steps=2 --optimizers skewadam --out " + d));
    CHECK(v.status == 1);
    CHECK(v.output.find("data: split val: token id 60000 at offset 3 of shard " + val +
                        "/val_000000.bin (byte 1030)") != std::string::npos);
    CHECK_FALSE(fs::exists(d));
}

TEST_CASE("a failed start leaves no run folder and the same --out then works with the command fixed") {
    const std::string d = work_dir() + "/failed-start";
    const std::string common = "--set train.steps=2 --set train.eval_every=2 --optimizers skewadam --out " + d;
    Run cuda = run(train_args("--set runtime.backend=cuda " + common));
    INFO(cuda.output);
    if (cuda.status == 0) {
        fs::remove_all(d);  // a CUDA build on a host with a GPU: nothing to refuse here
    } else {
        CHECK(cuda.status == 1);
        CHECK(cuda.output.find("runtime.backend: cuda, but") != std::string::npos);
        CHECK_FALSE(fs::exists(d));
    }
    Run profile = run(train_args(common + " --profile-steps 1:1"));
    CHECK(profile.status == 1);
    CHECK(profile.output.find("--profile-steps 1:1: profiling brackets steps") != std::string::npos);
    CHECK_FALSE(fs::exists(d));
    Run huge =
        run(train_args("--set model.d_model=4096 --set model.n_heads=32 --set model.n_kv_heads=8 "
                       "--set model.n_experts=8192 --set model.d_expert=4096 --set model.d_ff=4096 " +
                       common));
    CHECK(huge.status == 1);
    CHECK(huge.output.find("GiB available") != std::string::npos);
    CHECK_FALSE(fs::exists(d));
    Run fixed = run(train_args(common));
    INFO(fixed.output);
    REQUIRE(fixed.status == 0);
    CHECK(fs::exists(d + "/checkpoints/skewadam/last/model.safetensors"));
    // A folder the user made beforehand is left as it was: empty.
    const std::string mine = work_dir() + "/failed-start-mine";
    fs::create_directories(mine);
    Run in_mine = run(train_args("--set train.steps=2 --optimizers skewadam --profile-steps 1:2 --out " + mine));
    CHECK(in_mine.status == 1);
    CHECK(empty_dir(mine));
    REQUIRE(
        run(train_args("--set train.steps=2 --set train.eval_every=2 --optimizers skewadam --out " + mine)).status ==
        0);
    CHECK(fs::exists(mine + "/metrics_skewadam.json"));
}

TEST_CASE("a run failing after its folder is made and before any checkpoint takes back only what it wrote") {
    // The step log's path is taken by a folder of the user's: opening the log fails after
    // config.yaml and manifest.json are written.
    const std::string d = work_dir() + "/takeback";
    fs::create_directories(d + "/steps_skewadam.jsonl");
    Run r = run(train_args("--set train.steps=2 --set train.eval_every=2 --optimizers skewadam --out " + d));
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("failed before the first checkpoint; removed what this run wrote to " + d) !=
          std::string::npos);
    CHECK_FALSE(fs::exists(d + "/config.yaml"));
    CHECK_FALSE(fs::exists(d + "/manifest.json"));
    CHECK_FALSE(fs::exists(d + "/checkpoints"));
    CHECK(fs::is_directory(d + "/steps_skewadam.jsonl"));  // the user's, kept
    fs::remove(d + "/steps_skewadam.jsonl");
    Run fixed = run(train_args("--set train.steps=2 --set train.eval_every=2 --optimizers skewadam --out " + d));
    INFO(fixed.output);
    CHECK(fixed.status == 0);
}

TEST_CASE("train --out with an empty path is an error, not runtime.out_dir") {
    const std::string cwd = work_dir() + "/empty-out";
    fs::create_directories(cwd);
    Run r = run_in(cwd, train_args("--set train.steps=2 --optimizers skewadam --out ''"));
    CHECK(r.status == 1);
    CHECK(r.output.find("--out: empty path") != std::string::npos);
    CHECK(empty_dir(cwd));  // no runs/tiny (runtime.out_dir) here
}

TEST_CASE("a resumed run already at or past its stop-after step stops at once with the checkpoint unchanged") {
    const std::string d = work_dir() + "/stop-resumed";
    REQUIRE(run(train_args("--set train.steps=6 --set train.eval_every=2 --set train.checkpoint_every=100 "
                           "--optimizers skewadam,adamw --out " +
                           d + " --stop-after 3"))
                .status == 0);
    const std::string model = d + "/checkpoints/skewadam/last/model.safetensors";
    const std::string before = read_bytes(model);
    const std::string state_before = read_bytes(d + "/checkpoints/skewadam/last/trainer_state.json");
    for (const char* n : {"2", "3"}) {
        Run r = run("train --plain --resume " + d + " --stop-after " + n);
        INFO(r.output);
        CHECK(r.status == 0);
        CHECK(r.output.find(std::string("skewadam: --stop-after ") + n +
                            ": the checkpoint is at step 3 already; stopping without a step (checkpoint unchanged)") !=
              std::string::npos);
        CHECK(read_bytes(model) == before);
        CHECK(read_bytes(d + "/checkpoints/skewadam/last/trainer_state.json") == state_before);
        CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 3);
        CHECK_FALSE(fs::exists(d + "/steps_adamw.jsonl"));  // the next optimizer does not start either
    }
    Run later = run("train --plain --resume " + d + " --stop-after 4");
    CHECK(later.status == 0);
    CHECK(read_jsonl(d + "/steps_skewadam.jsonl").size() == 4);
}

// The tolerance: the cores' fp32 products differ only in summation order (and FMA), so an output of
// a length-k product moves by at most ~2·k·u of Σ|a·b| (Higham's γ_k, u = 2^-24); k <= 256 here
// (the LM head's input gradient sums 256-column vocabulary tiles; d_model 64, d_ff 128, 64 tokens
// per microbatch): <= 3.1e-5. Rounding to bf16 (relative step 2^-8) turns a difference δ into a
// one-step change for at most a fraction δ / 2^-8 of the activations, so a mean (the loss) or a
// norm (the gradient norm) moves by at most δ again, even with every change in one direction. The
// step chains a few such products (forward to the loss, backward to the gradients): within 1e-4,
// relative. (Measured on an AMD EPYC Zen 5: Haswell's kernels 5.4e-7 on the gradient norm,
// SkylakeX's and Cooperlake's 1e-13, the loss equal.)
TEST_CASE("the OpenBLAS core skew chooses gives the generic Prescott core's training step within 1e-4") {
    auto step1 = [&](const std::string& env, const std::string& name) {
        const std::string out = work_dir() + "/" + name;
        Run r = skew::test::run_shell(
            "env -u OPENBLAS_CORETYPE -u SKEW_BLAS_CORE_CHOICE " + env + " " + std::string(SKEW_BINARY) + " " +
            train_args("--set train.steps=1 --set train.eval_every=1 --optimizers adamw --out " + out));
        INFO(r.output);
        REQUIRE(r.status == 0);
        const auto steps = read_jsonl(out + "/steps_adamw.jsonl");
        REQUIRE(steps.size() == 1);
        return std::pair{steps[0], read_json(out + "/metrics_adamw.json")["blas_core"].get<std::string>()};
    };
    const auto [generic, generic_core] = step1("OPENBLAS_CORETYPE=Prescott", "core_prescott");
    const auto [chosen, chosen_core] = step1("", "core_chosen");
    CHECK(generic_core == "Prescott");  // the user's OPENBLAS_CORETYPE wins
    // skew's choice: at least the best core this processor's features allow that the library holds
    const std::string best = skew::cpu::blas_core_for(skew::cpu::cpu_vector_features());
    INFO("chosen " << chosen_core << ", best for the features " << best);
    if (!best.empty() && skew::cpu::blas_core_available(best.c_str()))
        CHECK(skew::cpu::blas_core_rank(chosen_core) >= skew::cpu::blas_core_rank(best));
    for (const char* key : {"lm_loss", "grad_norm"}) {
        INFO(key);
        CHECK(chosen[key].get<double>() == Approx(generic[key].get<double>()).epsilon(1e-4));
    }
}

// Six steps of a rope + rmsnorm + untied-head model with every block MoE and the architecture
// options `extra` (--set ...) with the optimizers `opts` (default SkewAdam and Muon) learn, and a run
// stopped at step 3 and resumed equals the uninterrupted one bit for bit (losses, weights, optimizer
// state); `name` names the folders (work_dir()/name holds the uninterrupted run).
static void check_llama_family_trains_and_resumes(const std::string& name, const std::string& extra,
                                                  const std::vector<std::string>& opts = {"skewadam", "muon"}) {
    const std::string a = work_dir() + "/" + name, b = work_dir() + "/" + name + "-stopped";
    std::string opt_list;
    for (const std::string& o : opts) opt_list += (opt_list.empty() ? "" : ",") + o;
    const std::string common =
        "--set model.positions=rope --set model.rope_theta=1e6 --set model.norm=rmsnorm --set "
        "model.tie_embeddings=false "
        "--set model.moe_blocks=[0,1] --set train.steps=6 --set train.eval_every=3 --set train.checkpoint_every=100 "
        "--optimizers " +
        opt_list + " " + extra + " ";
    Run full = run(train_args(common + "--out " + a));
    INFO(full.output);
    REQUIRE(full.status == 0);
    REQUIRE(run(train_args(common + "--out " + b + " --stop-after 3")).status == 0);
    Run resume = run("train --plain --resume " + b);
    INFO(resume.output);
    REQUIRE(resume.status == 0);
    for (const std::string& opt : opts) {
        INFO("optimizer " << opt);
        auto sa = read_jsonl(a + "/steps_" + opt + ".jsonl"), sb = read_jsonl(b + "/steps_" + opt + ".jsonl");
        REQUIRE(sa.size() == 6);
        REQUIRE(sb.size() == 6);
        CHECK(sa.back()["lm_loss"].get<double>() < sa.front()["lm_loss"].get<double>());  // it learns
        for (size_t i = 0; i < sa.size(); ++i)
            for (const char* key : {"lm_loss", "balance_loss", "z_loss", "grad_norm"}) CHECK(sa[i][key] == sb[i][key]);
        CHECK(read_bytes(a + "/checkpoints/" + opt + "/last/model.safetensors") ==
              read_bytes(b + "/checkpoints/" + opt + "/last/model.safetensors"));
        CHECK(read_bytes(a + "/checkpoints/" + opt + "/last/optimizer.safetensors") ==
              read_bytes(b + "/checkpoints/" + opt + "/last/optimizer.safetensors"));
    }
}

TEST_CASE("a rope + rmsnorm + untied-head model with every block MoE trains, and resumes bit for bit") {
    check_llama_family_trains_and_resumes("llama", "");
}

// tiny.yaml's d_model 64 over 4 heads is 16 lanes a head; head_dim 32 makes q 128 wide (Qwen3's shape)
TEST_CASE("a model with QK-norm per head and head_dim != d_model / n_heads trains, and resumes bit for bit") {
    check_llama_family_trains_and_resumes("qwen3",
                                          "--set model.qk_norm=per_head --set model.head_dim=32 --set "
                                          "model.norm_eps=1e-6");
}

// With shared experts behind the sigmoid gate (Qwen2-MoE; docs/architectures.md), trained by SkewAdam
// with the shared experts in the backbone's momentum tier (the default), by an entry that puts them in
// the routed experts' tier (momentum none), and by Muon (their matrices orthogonalized).
TEST_CASE("a model with gated shared experts trains, and resumes bit for bit") {
    check_llama_family_trains_and_resumes(
        "llama-shared",
        "--set model.moe_blocks=all --set model.n_shared_experts=2 --set model.d_shared_expert=32 --set "
        "model.shared_expert_gate=sigmoid --set optimizers.shared-in-expert-tier.type=skewadam --set "
        "optimizers.shared-in-expert-tier.tiers.shared_experts.momentum=none",
        {"skewadam", "muon", "shared-in-expert-tier"});
    // the shared experts' momentum is kept by the default entry only; both factor their second moment
    const std::string a = work_dir() + "/llama-shared";
    const std::string m = "state.blocks.0.moe.shared_experts.w1.m", row = "state.blocks.0.moe.shared_experts.w1.row";
    const std::string with = read_bytes(a + "/checkpoints/skewadam/last/optimizer.safetensors");
    const std::string without = read_bytes(a + "/checkpoints/shared-in-expert-tier/last/optimizer.safetensors");
    CHECK(with.find(m + "\"") != std::string::npos);
    CHECK(without.find(m + "\"") == std::string::npos);
    CHECK(with.find(row) != std::string::npos);
    CHECK(without.find(row) != std::string::npos);
}

// configs/olmoe-tiny.yaml, OLMoE's architecture at tiny width (every block an MoE, top-8 of 64 not
// renormalized, QK-norm over the full q and k, RoPE, RMSNorm, untied head), trains: six steps of 4 x 32
// tokens (the test data is small) of SkewAdam, AdamW and Adafactor from one initialization lower the
// loss, with every block's balance loss finite (docs/architectures.md, "The tier experiment").
TEST_CASE("configs/olmoe-tiny.yaml trains with SkewAdam, AdamW and Adafactor") {
    const std::string a = work_dir() + "/olmoe-tiny";
    Run r =
        run("train " + std::string(SKEW_SOURCE_DIR) + "/configs/olmoe-tiny.yaml --plain --set data.dir=" + prepared() +
            " --set train.steps=6 --set train.batch_size=4 --set train.microbatch=2 --set train.seq_len=32 --set "
            "train.eval_every=3 "
            "--set train.eval_batches=2 --set train.checkpoint_every=100 --out " +
            a);
    INFO(r.output);
    REQUIRE(r.status == 0);
    for (const std::string opt : {"skewadam", "adamw", "adafactor"}) {
        INFO("optimizer " << opt);
        auto s = read_jsonl(a + "/steps_" + opt + ".jsonl");
        REQUIRE(s.size() == 6);
        CHECK(s.back()["lm_loss"].get<double>() < s.front()["lm_loss"].get<double>());
        for (const auto& row : s) CHECK(std::isfinite(row["balance_loss"].get<double>()));
    }
}
