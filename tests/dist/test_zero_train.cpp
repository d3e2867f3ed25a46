// `mpirun -np 2 skew train` with ZeRO-1 (parallel.zero_stage 1) against plain data parallel
// (zero_stage 0) on committed real text (docs/distributed.md, "ZeRO-1"): both sum the same
// gradients with the same collectives, so the only difference is which rank computes each update;
// the weights and losses after 20 steps are bit-identical (SkewAdam, AdamW, Muon, GaLore). A stopped and resumed
// ZeRO-1 run equals an uninterrupted one bit for bit; resuming on another layout is refused naming
// both; `skew export` writes the checkpoint's weights as one file, which `skew sample` and the
// single-process reader load.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "checkpoint/sharded_checkpoint.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "tests/cli_util.h"
#include "tests/dist/mpirun.h"
#include "tests/dist/run_files.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using skew::test::Run;

namespace {

// one optimizer of each kind of update: factored (SkewAdam), element-wise (AdamW), Newton-Schulz (Muon),
// projected (GaLore's paper form); test_zero_mpi steps every optimizer
const char* OPTIMIZERS = "[skewadam,adamw,muon,galore-paper]";

const std::string& work_dir() {
    static const std::string dir = skew::test::dist_work_dir("skew-zero-train");
    return dir;
}

const std::string& prepared() {
    static const std::string dir = skew::test::prepared_sample(work_dir());
    return dir;
}

/// `mpirun -np N skew <args>`: exit status and output.

std::string train_args(const std::string& out, const std::string& extra, const std::string& optimizers = OPTIMIZERS) {
    return "train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --plain --out " + out +
           " --set data.dir=" + prepared() +
           " --set train.batch_size=4 --set train.microbatch=1 --set train.eval_batches=2 " +
           "--set train.steps=20 --set train.eval_every=10 --set train.checkpoint_every=10 --set runtime.threads=1 " +
           "--set train.optimizers=" + optimizers + " " + extra;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::string> optimizer_names() {
    std::string s = OPTIMIZERS;
    std::vector<std::string> out;
    std::string cur;
    for (char c : s.substr(1, s.size() - 2)) {
        if (c == ',') out.push_back(cur), cur.clear();
        else cur += c;
    }
    out.push_back(cur);
    return out;
}

}  // namespace

TEST_CASE(
    "mpirun -np 2: ZeRO-1 equals data parallel (zero_stage 0) bit for bit over 20 steps, "
    "a stopped and resumed ZeRO-1 run equals an uninterrupted one, other layouts are refused, export") {
    if (!skew::test::have_mpirun()) {
        WARN("mpirun not found: skipped");
        std::exit(77);
    }
    const std::string dp = work_dir() + "/dp", zero = work_dir() + "/zero", resumed = work_dir() + "/resumed";
    Run a = skew::test::mpirun_skew(2, train_args(dp, "--set parallel.zero_stage=0"));
    if (a.status != 0) FAIL(a.output);
    Run b = skew::test::mpirun_skew(2, train_args(zero, "--set parallel.zero_stage=1"));
    if (b.status != 0) FAIL(b.output);
    for (const std::string& opt : optimizer_names()) {
        INFO(opt);
        const std::string tail = "/checkpoints/" + opt + "/last/";
        // rank 0 writes the whole weights in both layouts (same metadata): the files are equal
        CHECK(read_file(dp + tail + "model.safetensors") == read_file(zero + tail + "model.safetensors"));
        CHECK(skew::test::step_losses(dp, opt) == skew::test::step_losses(zero, opt));
        CHECK(skew::test::step_losses(zero, opt).size() == 20);
        // ZeRO-1 shards the state: two shards; stage 0 writes one (rank 0's whole state)
        CHECK(fs::exists(zero + tail + "optimizer.rank-0-of-2.safetensors"));
        CHECK(fs::exists(zero + tail + "optimizer.rank-1-of-2.safetensors"));
        CHECK(fs::exists(zero + tail + "layout.json"));
        CHECK(!fs::exists(dp + tail + "optimizer.rank-1-of-2.safetensors"));
    }

    // stopped after step 10 and resumed: every file of the last checkpoints equals the uninterrupted
    // run's. --stop-after ends the whole run, so each optimizer is stopped and resumed in a run of
    // its own (one initialization and batch sequence per config: the same as in the run of four).
    for (const std::string& opt : optimizer_names()) {
        INFO(opt << " resumed");
        const std::string dir = resumed + "-" + opt;
        Run s = skew::test::mpirun_skew(2, train_args(dir, "--stop-after 10", "[" + opt + "]"));
        if (s.status != 0) FAIL(s.output);
        CHECK(skew::test::step_losses(dir, opt).size() == 10);
        if (opt == optimizer_names().front()) {
            Run wrong = skew::test::mpirun_skew(4, "train --resume " + dir + " --plain");
            INFO(wrong.output);
            CHECK(wrong.status != 0);
            CHECK(wrong.output.find("world size 2") != std::string::npos);
            CHECK(wrong.output.find("world size 4") != std::string::npos);
            Run one = skew::test::run_skew("train --resume " + dir + " --plain");
            INFO(one.output);
            CHECK(one.status != 0);
            CHECK(one.output.find("sharded checkpoint") != std::string::npos);
        }
        Run r = skew::test::mpirun_skew(2, "train --resume " + dir + " --plain");
        if (r.status != 0) FAIL(r.output);
        CHECK(skew::test::step_losses(dir, opt) == skew::test::step_losses(zero, opt));
        const std::string tail = "/checkpoints/" + opt + "/last/";
        for (const char* f :
             {"model.safetensors", "optimizer.rank-0-of-2.safetensors", "optimizer.rank-1-of-2.safetensors"})
            CHECK(read_file(zero + tail + f) == read_file(dir + tail + f));
    }

    // export: one file, the single-process names; sample reads the sharded run
    const std::string out = work_dir() + "/adamw.safetensors";
    Run e = skew::test::run_skew("export " + zero + " --optimizer adamw --out " + out);
    INFO(e.output);
    REQUIRE(e.status == 0);
    {
        const skew::ParamTable table = skew::build_param_table(skew::load_config(zero + "/config.yaml").model);
        const auto ckpt = skew::read_checkpoint_weights(zero + "/checkpoints/adamw/last", table);
        const skew::SafetensorsHeader h = skew::read_safetensors_header(out);
        REQUIRE(h.tensors.size() == ckpt.size());
        const std::string bytes = read_file(out);
        for (const auto& t : ckpt) {
            INFO(t.name);
            const skew::SafetensorsEntry* en = h.find(t.name);
            REQUIRE(en != nullptr);
            CHECK(en->shape == t.shape);
            CHECK(std::memcmp(bytes.data() + h.data_start + en->begin, t.data.data(), t.data.size()) == 0);
        }
    }
    Run smp = skew::test::run_skew("sample " + zero +
                                   " --optimizer adamw --which last --prompt 'The' --max-tokens 4 "
                                   "--backend cpu --seed 1 --tokenizer " +
                                   std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data/gpt2");
    INFO(smp.output);
    CHECK(smp.status == 0);
}
