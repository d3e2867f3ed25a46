// Resume of an expert-parallel run (docs/distributed.md, "Checkpoints and export"): `mpirun -np N
// skew train` with parallel.expert M for 8 steps straight, against the same run stopped after step 4
// (--stop-after) and continued with `skew train --resume`: the step losses and every file of the
// last and best checkpoints (the non-expert weights and optimizer state, every expert shard's bank
// weights and optimizer state, layout.json) are bit-identical, for SkewAdam (factored row/column
// statistics per expert) and AdamW (m and v per element). ZeRO stage 0 at N = 2 with M = 2 and
// N = 4 with M = 4 and M = 2 (two replicas of each expert shard; only the first writes it, the
// second reads it back); ZeRO-1 at N = 2 and 4 with M = 2 (the non-expert state cut over all
// ranks, each expert shard's over its holders), which also equals stage 0 bit for bit. A resume on
// another world size, expert parallelism or ZeRO stage is refused naming both layouts, and `skew
// export` merges the resumed run's expert shards into the whole banks.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "tests/cli_util.h"
#include "tests/dist/mpirun.h"
#include "tests/dist/run_files.h"
#include "tests/skip.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using skew::test::mpirun_skew;
using skew::test::read_bytes;
using skew::test::read_safetensors;
using skew::test::Run;

namespace {

const char* const OPTIMIZERS[] = {"skewadam", "adamw"};
constexpr int STEPS = 8, STOP = 4, EXPERTS = 8;  // configs/tiny.yaml: 8 experts, one MoE block

const std::string& work_dir() {
    static const std::string dir = skew::test::dist_work_dir("skew-ep-resume");
    return dir;
}

const std::string& prepared() {
    static const std::string dir = skew::test::prepared_sample(work_dir());
    return dir;
}

std::string train_args(int M, const std::string& out, const std::string& optimizers, int zero_stage = 0) {
    return "train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --plain --set data.dir=" + prepared() +
           " --set train.batch_size=4 --set train.microbatch=1 --set train.seq_len=16 --set train.eval_batches=1"
           " --set train.steps=" +
           std::to_string(STEPS) + " --set train.eval_every=" + std::to_string(STOP) +
           " --set train.checkpoint_every=" + std::to_string(STOP) +
           " --set runtime.threads=1 --set parallel.zero_stage=" + std::to_string(zero_stage) +
           " --set parallel.expert=" + std::to_string(M) + " --optimizers " + optimizers + " --out " + out;
}

/// trainer_state.json without its wall-clock field (train_seconds differs from run to run).
json trainer_state(const std::string& dir) {
    json j = json::parse(read_bytes(dir + "/trainer_state.json"));
    j.erase("train_seconds");
    return j;
}

/// "" when files a and b are byte-identical, else what differs (the first tensor of a safetensors
/// file whose values differ), so a failure names the tensor instead of printing bytes.
std::string difference(const std::string& a, const std::string& b) {
    if (read_bytes(a) == read_bytes(b)) return "";
    if (a.size() > 12 && a.substr(a.size() - 12) == ".safetensors") {
        const auto ta = read_safetensors(a), tb = read_safetensors(b);
        for (const auto& [name, v] : ta)
            if (!tb.count(name) || tb.at(name) != v) return "tensor '" + name + "' differs";
        return "the header or metadata differs";
    }
    return "the bytes differ";
}

std::set<std::string> files_in(const std::string& dir) {
    std::set<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
    return out;
}

std::string shard(const char* kind, int er, int M) {
    return std::string(kind) + ".experts-" + std::to_string(er) + "-of-" + std::to_string(M) + ".safetensors";
}

/// The bank state of a stage-0 checkpoint `b` of expert parallelism M: optimizer.safetensors holds
/// no bank; each expert shard's file holds its E/M experts of every bank, listed in layout.json,
/// and the shards' values differ (each shard's own statistics).
void check_stage0_state(const std::string& b, int M) {
    for (const auto& [name, v] : read_safetensors(b + "/optimizer.safetensors"))
        CHECK(name.find("moe.experts.") == std::string::npos);
    std::vector<std::map<std::string, std::vector<float>>> states;
    for (int er = 0; er < M; ++er) {
        const std::string path = b + "/" + shard("optimizer", er, M);
        const skew::SafetensorsHeader h = skew::read_safetensors_header(path);
        CHECK(h.tensors.size() >= 3);  // w1, w2, w3 of the MoE block: at least one state each
        for (const skew::SafetensorsEntry& e : h.tensors) {
            INFO(e.name);
            CHECK(e.name.find("moe.experts.") != std::string::npos);
            REQUIRE(!e.shape.empty());
            CHECK(e.shape[0] == EXPERTS / M);
        }
        states.push_back(read_safetensors(path));
    }
    for (int er = 1; er < M; ++er) {
        bool differs = false;
        for (const auto& [name, v] : states[0]) differs = differs || states[size_t(er)].at(name) != v;
        CHECK(differs);
    }
    const json layout = json::parse(read_bytes(b + "/layout.json"));
    std::set<std::string> listed;
    for (const json& e : layout.at("optimizer_shards")) listed.insert(e.at("file").get<std::string>());
    std::set<std::string> state_files = {"optimizer.safetensors"};
    for (int er = 0; er < M; ++er) state_files.insert(shard("optimizer", er, M));
    CHECK(listed == state_files);
}

/// The bank state of a ZeRO-1 checkpoint `b` of N ranks and expert parallelism M (docs/distributed.md,
/// "ZeRO-1"): every expert of every bank is owned by exactly one rank, a rank holding its shard
/// (rank % M == expert / (E/M)), and the rank's file holds the state of exactly its owned experts.
void check_zero_state(const std::string& b, int np, int M) {
    const json layout = json::parse(read_bytes(b + "/layout.json"));
    std::map<std::string, std::vector<int>> owner;  // bank -> owning rank per expert
    REQUIRE(layout.at("optimizer_shards").size() == size_t(np));
    for (const json& e : layout.at("optimizer_shards")) {
        const int r = e.at("rank").get<int>();
        CHECK(e.at("file").get<std::string>() ==
              "optimizer.rank-" + std::to_string(r) + "-of-" + std::to_string(np) + ".safetensors");
        const skew::SafetensorsHeader h = skew::read_safetensors_header(b + "/" + e.at("file").get<std::string>());
        for (const json& o : e.at("owned")) {
            if (!o.contains("experts")) continue;
            const std::string bank = o.at("param");
            const int begin = o.at("experts")[0], end = o.at("experts")[1];
            INFO("rank " << r << " owns experts [" << begin << ", " << end << ") of " << bank);
            std::vector<int>& v = owner.try_emplace(bank, std::vector<int>(EXPERTS, -1)).first->second;
            for (int x = begin; x < end; ++x) {
                CHECK(v[size_t(x)] == -1);
                v[size_t(x)] = r;
                CHECK(r % M == x / (EXPERTS / M));  // a holder of that expert's shard
            }
            int states = 0;
            for (const skew::SafetensorsEntry& t : h.tensors)
                if (t.name.rfind("state." + bank + ".", 0) == 0) {
                    ++states;
                    CHECK(t.shape.at(0) == end - begin);
                }
            CHECK(states >= 1);
        }
    }
    CHECK(owner.size() == 3);
    std::set<int> owning;  // ranks owning some expert: every rank (each shard's experts cut over its holders)
    for (const auto& [bank, v] : owner)
        for (int x = 0; x < EXPERTS; ++x) {
            CHECK(v[size_t(x)] >= 0);
            owning.insert(v[size_t(x)]);
        }
    CHECK(owning.size() == size_t(np));
}

/// The straight and the stopped-and-resumed run of N ranks with expert parallelism M and ZeRO stage
/// zero_stage: every checkpoint file equal, and the files each expert shard's state must be in.
/// Under ZeRO-1 the straight run also equals the stage-0 run bit for bit (losses and weights).
void check_resume(int np, int M, int zero_stage = 0) {
    if (!skew::test::have_mpirun()) SKEW_SKIP_TEST("mpirun not found");
    const std::string tag =
        "np" + std::to_string(np) + "-ep" + std::to_string(M) + "-zero" + std::to_string(zero_stage);
    for (const char* opt : OPTIMIZERS) {
        // one optimizer per run: --stop-after stops the whole run at the first optimizer's step
        const std::string straight = work_dir() + "/straight-" + tag + "-" + opt,
                          resumed = work_dir() + "/resumed-" + tag + "-" + opt;
        INFO(np << " ranks, expert parallel " << M << ", " << opt);
        {
            Run r = mpirun_skew(np, train_args(M, straight, opt, zero_stage));
            INFO(r.output);
            REQUIRE(r.status == 0);
        }
        {
            Run r = mpirun_skew(np, train_args(M, resumed, opt, zero_stage) + " --stop-after " + std::to_string(STOP));
            INFO(r.output);
            REQUIRE(r.status == 0);
            REQUIRE(trainer_state(resumed + "/checkpoints/" + opt + "/last").at("step") == STOP);
        }
        {
            Run r = mpirun_skew(np, "train --resume " + resumed + " --plain");
            INFO(r.output);
            REQUIRE(r.status == 0);
            CHECK(r.output.find("resuming from step " + std::to_string(STOP)) != std::string::npos);
        }
        const std::vector<double> la = skew::test::step_losses(straight, opt),
                                  lb = skew::test::step_losses(resumed, opt);
        CHECK(la.size() == size_t(STEPS));
        CHECK(la == lb);
        for (const char* which : {"last", "best"}) {
            const std::string a = straight + "/checkpoints/" + opt + "/" + which,
                              b = resumed + "/checkpoints/" + opt + "/" + which;
            INFO(which);
            // what an expert-parallel checkpoint holds: the non-expert weights once, each expert
            // shard's bank weights once; the state of stage 0 as the weights (non-expert once, each
            // expert shard's once), of ZeRO-1 one file per rank
            std::set<std::string> expected = {"layout.json", "trainer_state.json", "model.safetensors"};
            for (int er = 0; er < M; ++er) expected.insert(shard("model", er, M));
            if (zero_stage == 0) {
                expected.insert("optimizer.safetensors");
                for (int er = 0; er < M; ++er) expected.insert(shard("optimizer", er, M));
            } else {
                for (int r = 0; r < np; ++r)
                    expected.insert("optimizer.rank-" + std::to_string(r) + "-of-" + std::to_string(np) +
                                    ".safetensors");
            }
            CHECK(files_in(a) == expected);
            REQUIRE(files_in(b) == expected);
            for (const std::string& f : expected) {
                INFO(f);
                if (f == "trainer_state.json") CHECK(trainer_state(a) == trainer_state(b));
                else CHECK(difference(a + "/" + f, b + "/" + f) == "");  // every tensor, bit for bit
            }
            if (std::string(which) == "last") CHECK(trainer_state(b).at("step") == STEPS);
            if (zero_stage == 0) check_stage0_state(b, M);
            else check_zero_state(b, np, M);
        }
        if (zero_stage == 1) {
            // ZeRO-1 only moves who computes each update: the stage-0 run's losses and weights, bit for bit
            const std::string stage0 = work_dir() + "/stage0-" + tag + "-" + opt;
            Run r = mpirun_skew(np, train_args(M, stage0, opt, 0));
            INFO(r.output);
            REQUIRE(r.status == 0);
            CHECK(skew::test::step_losses(stage0, opt) == la);
            const std::string a = stage0 + "/checkpoints/" + opt + "/last/",
                              b = straight + "/checkpoints/" + opt + "/last/";
            CHECK(difference(a + "model.safetensors", b + "model.safetensors") == "");
            for (int er = 0; er < M; ++er)
                CHECK(difference(a + shard("model", er, M), b + shard("model", er, M)) == "");
        }
    }
    // export merges the resumed run's expert shards: model.safetensors plus each bank's shards
    // concatenated in expert order, value for value
    const std::string out = work_dir() + "/export-" + tag + ".safetensors";
    const std::string resumed = work_dir() + "/resumed-" + tag + "-adamw";
    Run e = skew::test::run_skew("export " + resumed + " --optimizer adamw --out " + out);
    INFO(e.output);
    REQUIRE(e.status == 0);
    const std::string ck = resumed + "/checkpoints/adamw/last/";
    auto merged = read_safetensors(ck + "model.safetensors");
    for (int er = 0; er < M; ++er)
        for (auto& [name, v] : read_safetensors(ck + shard("model", er, M)))
            merged[name].insert(merged[name].end(), v.begin(), v.end());
    const auto exported = read_safetensors(out);
    CHECK(exported.size() == merged.size());
    int banks = 0;
    for (const auto& [name, v] : merged) {
        INFO(name);
        REQUIRE(exported.count(name) == 1);
        CHECK(exported.at(name) == v);
        banks += name.find("moe.experts.") != std::string::npos ? 1 : 0;
    }
    CHECK(banks == 3);
}

}  // namespace

TEST_CASE("expert-parallel resume equals the straight run bit for bit: mpirun -np 2, parallel.expert 2", "[dist]") {
    check_resume(2, 2);
}

TEST_CASE("expert-parallel resume equals the straight run bit for bit: mpirun -np 4, parallel.expert 4", "[dist]") {
    check_resume(4, 4);
}

TEST_CASE("expert-parallel resume equals the straight run bit for bit: mpirun -np 4, parallel.expert 2 (two replicas)",
          "[dist]") {
    check_resume(4, 2);
}

TEST_CASE(
    "ZeRO-1 with expert parallel equals stage 0 bit for bit and resumes bit for bit: mpirun -np 2, parallel.expert 2",
    "[dist]") {
    check_resume(2, 2, 1);
}

TEST_CASE(
    "ZeRO-1 with expert parallel equals stage 0 bit for bit and resumes bit for bit: mpirun -np 4, parallel.expert 2 "
    "(each expert shard's state cut over its 2 holders)",
    "[dist]") {
    check_resume(4, 2, 1);
}

TEST_CASE(
    "expert-parallel resume on another world size, expert parallelism or ZeRO stage is refused naming both layouts",
    "[dist]") {
    if (!skew::test::have_mpirun()) SKEW_SKIP_TEST("mpirun not found");
    const std::string run = work_dir() + "/stopped";
    {
        Run r = mpirun_skew(2, train_args(2, run, "skewadam") + " --stop-after " + std::to_string(STOP));
        INFO(r.output);
        REQUIRE(r.status == 0);
    }
    const std::string before = read_bytes(run + "/checkpoints/skewadam/last/optimizer.experts-1-of-2.safetensors");
    REQUIRE(!before.empty());
    {
        // another world size is refused first, naming the one to resume with
        Run r = mpirun_skew(4, "train --resume " + run + " --plain", 120);
        INFO(r.output);
        CHECK(r.status != 0);
        CHECK(r.status != 124);
        CHECK(
            r.output.find("is a sharded checkpoint of world size 2; this run is world size 4: resume it with the same "
                          "world size (mpirun -np 2 skew train --resume " +
                          run + ")") != std::string::npos);
    }
    {
        // parallel.expert edited in the run's config.yaml (resume takes no --set): 2 ranks, M = 1
        const std::string edited = work_dir() + "/stopped-edited";
        fs::copy(run, edited, fs::copy_options::recursive);
        std::string yaml = read_bytes(edited + "/config.yaml");
        const size_t at = yaml.find("\n  expert: 2\n");
        REQUIRE(at != std::string::npos);
        yaml.replace(at, 12, "\n  expert: 1\n");
        std::ofstream(edited + "/config.yaml", std::ios::binary | std::ios::trunc) << yaml;
        Run r = mpirun_skew(2, "train --resume " + edited + " --plain", 120);
        INFO(r.output);
        CHECK(r.status != 0);
        CHECK(r.status != 124);
        CHECK(
            r.output.find("the checkpoint was written with world size 2, expert parallel 2, ZeRO stage 0; this run is "
                          "world size 2, expert parallel 1, ZeRO stage 0") != std::string::npos);
    }
    {
        // parallel.zero_stage edited: ZeRO-1 would read per-rank state files the run never wrote
        const std::string edited = work_dir() + "/stopped-zero1";
        fs::copy(run, edited, fs::copy_options::recursive);
        std::string yaml = read_bytes(edited + "/config.yaml");
        const size_t at = yaml.find("\n  zero_stage: 0\n");
        REQUIRE(at != std::string::npos);
        yaml.replace(at, 16, "\n  zero_stage: 1\n");
        std::ofstream(edited + "/config.yaml", std::ios::binary | std::ios::trunc) << yaml;
        Run r = mpirun_skew(2, "train --resume " + edited + " --plain", 120);
        INFO(r.output);
        CHECK(r.status != 0);
        CHECK(r.status != 124);
        CHECK(
            r.output.find("the checkpoint was written with world size 2, expert parallel 2, ZeRO stage 0; this run is "
                          "world size 2, expert parallel 2, ZeRO stage 1") != std::string::npos);
    }
    // the refused resumes changed nothing: the run still resumes with its own layout
    CHECK(read_bytes(run + "/checkpoints/skewadam/last/optimizer.experts-1-of-2.safetensors") == before);
    Run r = mpirun_skew(2, "train --resume " + run + " --plain");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(trainer_state(run + "/checkpoints/skewadam/last").at("step") == STEPS);
}
