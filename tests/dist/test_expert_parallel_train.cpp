// `mpirun -np N skew train` with parallel.expert M (docs/distributed.md, "Expert parallel") against
// data parallel on the same N ranks and global batches: 10 steps of SkewAdam and AdamW on
// configs/tiny.yaml (8 experts, top-2), N = 2 with M = 2, N = 4 with M = 4 and M = 2 (two
// expert-parallel groups whose expert gradients are also summed over the ranks holding the same
// experts); and N = 2 with M = 2 on tiny.yaml with two shared experts behind the sigmoid gate under
// ZeRO-1 (docs/architectures.md, "Shared experts": dense tensors, replicated by expert parallelism,
// partitioned by ZeRO as the backbone's). Losses and the final weights (the sharded checkpoint: every
// non-expert tensor and every expert shard, merged) within the tolerance of a changed summation order.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/dist/mpirun.h"
#include "tests/dist/run_files.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using skew::test::Run;

using skew::test::read_bytes;
using skew::test::read_safetensors;

namespace {

const std::string& work_dir() {
    static const std::string dir = skew::test::dist_work_dir("skew-ep-test");
    return dir;
}

const std::string& prepared() {
    static const std::string dir = skew::test::prepared_sample(work_dir());
    return dir;
}

const char* const OPTIMIZERS[] = {"skewadam", "adamw"};

// The model and layout variants of the runs: tiny.yaml as it is, or with shared experts under ZeRO-1.
const char* const SHARED_SETS =
    " --set model.n_shared_experts=2 --set model.d_shared_expert=16 --set model.shared_expert_gate=sigmoid"
    " --set parallel.zero_stage=1";

// N ranks, expert parallelism M (1: data parallel), 10 steps of every optimizer above (the
// tolerances below also hold at 20); made once.
std::string run(int np, int M, bool shared = false) {
    const std::string out =
        work_dir() + "/np" + std::to_string(np) + "-ep" + std::to_string(M) + (shared ? "-shared" : "");
    if (fs::exists(out + "/metrics_adamw.json")) return out;
    const std::string args =
        "train " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --plain --set data.dir=" + prepared() +
        " --set train.batch_size=4 --set train.microbatch=1 --set train.seq_len=16 --set train.eval_batches=1"
        " --set train.steps=10 --set train.eval_every=5 --set train.checkpoint_every=10 --set runtime.threads=1"
        " --set runtime.grad_dtype=fp32 --set parallel.zero_stage=0 --set parallel.expert=" +
        std::to_string(M) + (shared ? SHARED_SETS : "") + " --optimizers skewadam,adamw --out " + out;
    Run r = skew::test::mpirun_spec("-np " + std::to_string(np) + " " + std::string(SKEW_BINARY) + " " + args);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return out;
}

}  // namespace

// Tolerances (as data parallel against one process, tests/dist/test_data_parallel.cpp): an expert's
// gradient is one sum over every token routed to it on its owner, then summed over the holders of
// the same experts, where data parallel sums each rank's partial gradient over all ranks; the fp32
// sums differ in the last bits (~1e-7 relative) and the optimizer steps carry that (sign-based Lion
// and normalized SkewAdam updates can turn a near-zero difference into one lr-sized step). Losses
// within 1e-4 relative, weights within 5e-3.
TEST_CASE("expert parallel equals data parallel on the same ranks: 10 steps of SkewAdam and AdamW", "[dist]") {
    struct Layout {
        int np, M;
        bool shared = false;  // shared experts with the sigmoid gate, ZeRO-1
    };
    for (Layout l : {Layout{2, 2}, Layout{4, 4}, Layout{4, 2}, Layout{2, 2, true}}) {
        const std::string dp = run(l.np, 1, l.shared), ep = run(l.np, l.M, l.shared);
        for (const char* opt : OPTIMIZERS) {
            INFO(l.np << " ranks, expert parallel " << l.M << ", " << opt << (l.shared ? ", shared experts" : ""));
            const std::vector<double> la = skew::test::step_losses(dp, opt), lb = skew::test::step_losses(ep, opt);
            REQUIRE(la.size() == 10);
            REQUIRE(lb.size() == 10);
            double loss_rel = 0;
            for (size_t i = 0; i < la.size(); ++i) loss_rel = std::max(loss_rel, std::abs(la[i] - lb[i]) / la[i]);
            CHECK(loss_rel < 1e-4);
            CHECK(std::abs(la[0] - lb[0]) < 1e-12);  // step 1: the same forward pass on the same weights
            const auto wa = read_safetensors(dp + "/checkpoints/" + std::string(opt) + "/last/model.safetensors");
            // a sharded checkpoint: the non-expert weights in model.safetensors, expert rank er's
            // experts [er E/M, (er + 1) E/M) in model.experts-er-of-M; concatenated in expert order
            // (a bank is stored expert-major) they are the whole bank
            auto wb = read_safetensors(ep + "/checkpoints/" + std::string(opt) + "/last/model.safetensors");
            for (int er = 0; er < l.M; ++er)
                for (auto& [name, v] :
                     read_safetensors(ep + "/checkpoints/" + std::string(opt) + "/last/model.experts-" +
                                      std::to_string(er) + "-of-" + std::to_string(l.M) + ".safetensors"))
                    wb[name].insert(wb[name].end(), v.begin(), v.end());
            REQUIRE(wa.size() == wb.size());
            double max_abs = 0;
            std::string where;
            int banks = 0, shared = 0;
            for (const auto& [name, va] : wa) {
                const std::vector<float>& vb = wb.at(name);
                // every rank's experts, merged from the M expert shards: the whole bank
                if (name.find("moe.experts.") != std::string::npos) ++banks;
                if (name.find("moe.shared_experts.") != std::string::npos) ++shared;  // whole in model.safetensors
                REQUIRE(vb.size() == va.size());
                for (size_t i = 0; i < vb.size(); ++i) {
                    const double e = std::abs(double(va[i]) - double(vb[i]));
                    if (e > max_abs || std::isnan(e)) max_abs = std::isnan(e) ? 1e30 : e, where = name;
                }
            }
            INFO("max |dw| " << max_abs << " (" << where << "), max loss rel " << loss_rel);
            CHECK(banks == 3);
            CHECK(shared == (l.shared ? 4 : 0));
            CHECK(max_abs < 5e-3);
        }
    }
}

TEST_CASE("parallel.expert that does not divide the number of ranks is refused with a message", "[dist]") {
    const std::string out = work_dir() + "/ep-indivisible";
    Run r = skew::test::mpirun_spec(
        "-np 2 " + std::string(SKEW_BINARY) + " train " + std::string(SKEW_SOURCE_DIR) +
            "/configs/tiny.yaml --plain --set data.dir=" + prepared() +
            " --set train.batch_size=4 --set train.microbatch=1 --set parallel.expert=4 --optimizers adamw"
            " --out " +
            out,
        120);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK(r.status != 124);
    CHECK(r.output.find("parallel.expert 4 needs a multiple of 4 ranks (mpirun -np); this run has 2") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(out + "/config.yaml"));
}
