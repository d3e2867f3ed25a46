// `mpirun -np N skew train` with the gradient sums overlapped with the backward pass
// (parallel.overlap_grad_reduce: true, the default) against the same run with the sums after the
// backward (false), docs/distributed.md "Overlap with the backward pass": the same buckets and the
// same collectives, so every step's loss, every weight and every optimizer state tensor must be
// the same bits. Each case also reads rank 0's log: with the overlap every bucket's sum started
// during the backward (the hook fired for every parameter, the tied embedding's bucket last),
// without it none did. Small buckets (parallel.bucket_mib 0.02: 17 buckets of bf16 gradients on
// configs/tiny.yaml, most of them packed host copies) keep more buckets in flight than the staging
// slots (DP_MAX_STAGING_SLOTS).
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/dist/mpirun.h"
#include "tests/dist/run_files.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using skew::test::Run;
using skew::test::mpirun_skew;

namespace {

// `timeout 500 mpirun -np N --oversubscribe skew ARGS`, stdout and stderr together.

const std::string& work_dir() {
    static const std::string dir = skew::test::dist_work_dir("skew-overlap-test");
    return dir;
}

const std::string& prepared() {
    static const std::string dir = skew::test::prepared_sample(work_dir());
    return dir;
}

// "N of them started during the backward" from rank 0's log; -1 when absent.
struct Started {
    long buckets = -1, during_backward = -1;
};
Started started(const std::string& log) {
    std::smatch m;
    static const std::regex re(R"(gradients summed in (\d+) buckets .*?; (\d+) of them started during the backward)");
    if (!std::regex_search(log, m, re)) return {};
    return {std::stol(m[1]), std::stol(m[2])};
}

// configs/tiny.yaml, global batches of 4 sequences of 16 tokens in microbatches of 1, 6 steps of
// `opts`, on `np` ranks, with the overlap on and off; every checkpoint file of every optimizer and
// every step loss compared bit for bit.
void same_with_and_without_overlap(int np, const std::string& name, const std::string& extra,
                                   const std::vector<std::string>& opts) {
    std::string list;
    for (const std::string& o : opts) list += (list.empty() ? "" : ",") + o;
    const std::string args = "train " + std::string(SKEW_SOURCE_DIR) +
                             "/configs/tiny.yaml --plain --set data.dir=" + prepared() +
                             " --set train.batch_size=4 --set train.microbatch=1 --set train.seq_len=16"
                             " --set train.eval_batches=1 --set train.steps=6 --set train.eval_every=6"
                             " --set train.checkpoint_every=6 --set runtime.threads=1 --optimizers " +
                             list + " " + extra;
    const std::string on = work_dir() + "/" + name + "-on", off = work_dir() + "/" + name + "-off";
    const Run a = mpirun_skew(np, args + " --out " + on);
    INFO(a.output);
    REQUIRE(a.status == 0);
    const Run b = mpirun_skew(np, args + " --set parallel.overlap_grad_reduce=false --out " + off);
    INFO(b.output);
    REQUIRE(b.status == 0);
    const Started sa = started(a.output), sb = started(b.output);
    CHECK(sa.buckets > 1);
    CHECK(sa.during_backward == sa.buckets);  // every bucket's sum started inside the backward
    CHECK(sb.buckets == sa.buckets);
    CHECK(sb.during_backward == 0);
    for (const std::string& opt : opts) {
        INFO(opt);
        const std::vector<double> la = skew::test::step_losses(on, opt), lb = skew::test::step_losses(off, opt);
        REQUIRE(la.size() == 6);
        CHECK(la == lb);
        const fs::path dir = fs::path(on) / "checkpoints" / opt / "last";
        int tensors_files = 0;
        for (const auto& e : fs::directory_iterator(dir)) {
            if (e.path().extension() != ".safetensors") continue;
            INFO(e.path().filename().string());
            const std::string x = skew::test::read_bytes(e.path().string());
            REQUIRE(x.size() > 100);
            CHECK(x == skew::test::read_bytes(
                           (fs::path(off) / "checkpoints" / opt / "last" / e.path().filename()).string()));
            ++tensors_files;
        }
        CHECK(tensors_files >= 2);  // the weights and the optimizer state at least
    }
}

}  // namespace

TEST_CASE(
    "overlapped gradient sums equal the after-backward sums bit for bit: 2 ranks, 2 microbatches each, fp32 "
    "and bf16 gradients, small buckets",
    "[dist]") {
    same_with_and_without_overlap(2, "np2-fp32",
                                  "--set runtime.grad_dtype=fp32 --set parallel.zero_stage=0 "
                                  "--set parallel.bucket_mib=0.02",
                                  {"adamw", "skewadam"});
    same_with_and_without_overlap(2, "np2-bf16",
                                  "--set runtime.grad_dtype=bf16 --set parallel.zero_stage=0 "
                                  "--set parallel.bucket_mib=0.02",
                                  {"adamw"});
}

TEST_CASE("overlapped gradient sums equal the after-backward sums bit for bit: 4 ranks with ZeRO-1, bf16 gradients",
          "[dist]") {
    same_with_and_without_overlap(4, "np4-zero1",
                                  "--set runtime.grad_dtype=bf16 --set parallel.zero_stage=1 "
                                  "--set parallel.bucket_mib=0.02",
                                  {"adamw", "muon"});
}

TEST_CASE(
    "overlapped gradient sums equal the after-backward sums bit for bit: expert parallel over MPI (4 ranks, "
    "parallel.expert 2: the expert banks' buckets summed over their holders)",
    "[dist]") {
    same_with_and_without_overlap(4, "np4-ep2",
                                  "--set runtime.grad_dtype=fp32 --set parallel.zero_stage=0 "
                                  "--set parallel.expert=2 --set parallel.bucket_mib=0.02",
                                  {"adamw"});
}
