// The NCCL path at world size 1 (docs/distributed.md): `mpirun -np 1 skew train` on the CUDA
// backend sums its gradients with ncclAllReduce over one rank (a copy in place) on the backend's
// stream, and must equal the single-process CUDA run of the same config bit for bit.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_util.h"
#include "tests/dist/mpirun.h"
#include "tests/dist/run_files.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

TEST_CASE("NCCL with one rank (mpirun -np 1) equals the single-process CUDA run on configs/tiny.yaml", "[gpu][dist]") {
    SKEW_REQUIRE_MPIRUN();
    const std::string dir = (skew::test::test_temp_root() / "nccl-world1").string(), src = skew::test::source_dir();
    fs::create_directories(dir);
    skew::test::Run prep =
        skew::test::run_skew("prepare --input " + src + "/tests/fixtures/train/sample.jsonl --out " + dir +
                             "/prep --tokenizer " + src + "/tests/fixtures/data/gpt2 --no-progress");
    INFO(prep.output);
    REQUIRE(prep.status == 0);
    const std::string args = "train " + src + "/configs/tiny.yaml --plain --set data.dir=" + dir +
                             "/prep --set runtime.backend=cuda --set train.steps=10 --set train.eval_every=5 "
                             "--set train.checkpoint_every=10 --set train.batch_size=4 --set train.microbatch=2 "
                             "--set parallel.zero_stage=0 --optimizers skewadam,adamw --out ";
    skew::test::Run one = skew::test::run_skew(args + dir + "/one");
    INFO(one.output);
    REQUIRE(one.status == 0);
    skew::test::Run again = skew::test::run_skew(args + dir + "/again");  // is one process deterministic?
    REQUIRE(again.status == 0);
    const skew::test::Run nccl =
        skew::test::mpirun_spec("-np 1 " + skew::test::skew_binary() + " " + args + dir + "/nccl", 300);
    const std::string& out = nccl.output;
    INFO(out);
    REQUIRE(nccl.status == 0);
    CHECK(out.find("gradients summed over NCCL (nccl rank 0 of 1 (device 0))") != std::string::npos);
    for (const std::string opt : {"skewadam", "adamw"}) {
        const std::string model = "/checkpoints/" + opt + "/last/model.safetensors";
        const std::string w1 = skew::test::read_bytes(dir + "/one" + model);
        REQUIRE(w1.size() > 1000);
        if (w1 == skew::test::read_bytes(dir + "/again" + model)) {
            // one process repeats itself bit for bit: the NCCL run must too
            CHECK(w1 == skew::test::read_bytes(dir + "/nccl" + model));
        } else {
            // not deterministic run to run (atomics): the final validation perplexity to 1e-3
            WARN(opt << ": two single-process CUDA runs differ; comparing validation perplexity instead");
            auto ppl = [&](const std::string& run) {
                std::ifstream in(dir + "/" + run + "/metrics_" + opt + ".json");
                return nlohmann::json::parse(in)["summary"]["final_val_ppl"].get<double>();
            };
            CHECK(std::abs(ppl("nccl") - ppl("one")) <= 1e-3 * ppl("one"));
        }
    }
}
