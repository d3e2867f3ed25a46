// The `skew` binary as a user runs it: plan's JSON numbers for the paper's config, and bad input
// (config errors, bad flags) exiting non-zero with one clear message.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_util.h"
#include "tests/temp_dir.h"

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

std::string paper() { return std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml"; }

std::string write_temp(const std::string& name, const std::string& text) {
    std::string path = (skew::test::test_temp_root() / ("skew-test-" + name)).string();
    std::ofstream(path) << text;
    return path;
}

}  // namespace

TEST_CASE("skew plan --json reports SkewAdam's 1.29 GiB and the paper's parameter counts") {
    Run r = run("plan " + paper() + " --optimizer skewadam --json");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.output);
    CHECK(j["params"]["total"] == 6784327680LL);
    CHECK(j["params"]["router"] == 524288);
    CHECK(std::round(j["state"]["gib"].get<double>() * 100) / 100 == Approx(1.29));
    CHECK(std::round(j["weights"]["gib"].get<double>() * 100) / 100 == Approx(12.64));
    CHECK(j["state_components"].size() == 5);
    // runtime.backend auto plans for the GPU: the CUDA backend's memory is in the arena, and the
    // peak at microbatch 8 is 27.14 GiB (the LM head's logits share bytes with the blocks' working slots); the CPU backend's plan differs only in its head workspace.
    CHECK(j["backend"] == "cuda");
    CHECK(std::round(j["peak"]["gib"].get<double>() * 100) / 100 == Approx(27.14));
    Run cpu = run("plan " + paper() + " --optimizer skewadam --json --set runtime.backend=cpu");
    REQUIRE(cpu.status == 0);
    CHECK(nlohmann::json::parse(cpu.output)["backend"] == "cpu");
    bool found_adamw = false;
    for (auto& o : j["optimizers"])
        if (o["name"] == "adamw") {
            found_adamw = true;
            CHECK(std::round(o["state_gib"].get<double>() * 100) / 100 == Approx(50.55));
        }
    CHECK(found_adamw);
}

TEST_CASE("skew plan --budget says what fits and the largest microbatch") {
    Run r = run("plan " + paper() + " --budget 40GiB --json");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.output);
    CHECK(j["budget"]["fits"] == true);
    CHECK(j["budget"]["unit"] == "GiB (2^30 bytes)");
    CHECK(j["largest_microbatch"] == 64);
    Run a = run("plan " + paper() + " --optimizer adamw --budget 40GB");
    REQUIRE(a.status == 0);
    CHECK(a.output.find("read as GB (10^9 bytes)") != std::string::npos);
    CHECK(a.output.find("Does NOT fit") != std::string::npos);
    CHECK(a.output.find("No microbatch fits") != std::string::npos);
}

TEST_CASE("skew plan says how it resolved train.microbatch 0") {
    Run whole = run("plan " + paper() + " --set train.microbatch=0");
    REQUIRE(whole.status == 0);
    CHECK(whole.output.find("train.microbatch 0: planned at the whole batch (64) (no --budget given)") !=
          std::string::npos);
    Run fit = run("plan " + paper() + " --set train.microbatch=0 --budget 40GiB --json");
    REQUIRE(fit.status == 0);
    auto j = nlohmann::json::parse(fit.output);
    CHECK(j["microbatch"] == 64);
    CHECK(j["microbatch_note"].get<std::string>().find("the largest that fits --budget") != std::string::npos);
    Run none = run("plan " + paper() + " --set train.microbatch=0 --budget 20GiB");
    CHECK(none.output.find("since no microbatch fits --budget") != std::string::npos);
}

TEST_CASE("an unknown command is a usage error naming it and the commands") {
    Run r = run("nosuch");
    CHECK(r.status == 2);
    CHECK(r.output.find("unknown command 'nosuch' (commands: plan, config, prepare, tokenize, train, report") !=
          std::string::npos);
    CHECK(run("--log-level critical plan " + paper()).status == 0);
}

TEST_CASE("skew plan on a bad config exits non-zero naming the key and line") {
    std::string path = write_temp("bad-heads.yaml", "model:\n  d_model: 64\n  n_heads: 4\n  n_kv_heads: 3\n");
    Run r = run("plan " + path);
    CHECK(r.status == 1);
    CHECK(r.output.find("skew: error: " + path + ":4:15: model.n_kv_heads") != std::string::npos);
    std::string unknown = write_temp("bad-key.yaml", "train:\n  stpes: 10\n");
    Run u = run("plan " + unknown);
    CHECK(u.status == 1);
    CHECK(u.output.find("did you mean 'steps'") != std::string::npos);
}

TEST_CASE("bad flags and paths are refused with a message") {
    CHECK(run("plan /nonexistent.yaml").status == 1);
    CHECK(run("plan " + paper() + " --budget 40").output.find("has no unit") != std::string::npos);
    CHECK(run("plan " + paper() + " --microbatch 7").output.find("must divide train.batch_size") != std::string::npos);
    CHECK(run("plan " + paper() + " --optimizer sgd").output.find("unknown optimizer 'sgd'") != std::string::npos);
    CHECK(run("plan " + paper() + " --set train.steps=-5").status == 1);
    CHECK(run("nosuchcommand").status != 0);
}

TEST_CASE("skew config prints the resolved config and the key reference") {
    Run r = run("config " + paper() + " --set train.steps=7");
    REQUIRE(r.status == 0);
    CHECK(r.output.find("steps: 7") != std::string::npos);
    Run ref = run("config --reference");
    REQUIRE(ref.status == 0);
    CHECK(ref.output.find("`model.n_kv_heads`") != std::string::npos);
}

TEST_CASE("skew config --reference with a config file or --set is refused, not printed as if the file were read") {
    Run r = run("config --reference " + paper());
    CHECK(r.status == 2);
    CHECK(r.output.find("--reference: prints the key reference, which belongs to no config, so " + paper() +
                        " would be ignored: drop it to print the reference, or drop --reference") != std::string::npos);
    CHECK(r.output.find("`model.n_kv_heads`") == std::string::npos);
    Run s = run("config --reference --set train.steps=7");
    CHECK(s.status == 2);
    CHECK(s.output.find("so --set would be ignored") != std::string::npos);
}

TEST_CASE("docs/config-reference.md's config reference is the generated one") {
    Run ref = run("config --reference");
    REQUIRE(ref.status == 0);
    std::ifstream in(std::string(SKEW_SOURCE_DIR) + "/docs/config-reference.md");
    std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE_FALSE(doc.empty());
    INFO("regenerate: skew config --reference, between the config-reference markers of docs/config-reference.md");
    CHECK(doc.find(ref.output) != std::string::npos);
}

TEST_CASE("skew prepare on an input holding a symbolic link loop names the link and writes nothing") {
    namespace fs = std::filesystem;
    const fs::path d = skew::test::test_temp_root() / "skew-test-cli-prepare-loop";
    fs::remove_all(d);
    fs::create_directories(d / "in" / "sub");
    std::ofstream(d / "in" / "a.txt") << "A document.\n";
    fs::create_directory_symlink("..", d / "in" / "sub" / "up");
    Run r = run("prepare --input " + (d / "in").string() + " --out " + (d / "out").string() + " --tokenizer " +
                std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data/gpt2 --no-progress");
    CHECK(r.status == 1);
    CHECK(r.output.find("skew: error: data: " + (d / "in" / "sub" / "up").string() + ": a symbolic link loop") !=
          std::string::npos);
    CHECK(r.output.find("filesystem error") == std::string::npos);
    CHECK_FALSE(fs::exists(d / "out"));
    fs::remove_all(d);
}

TEST_CASE("skew config on /dev/null or /dev/zero names the file and does not hang") {
    Run null = run("config /dev/null");
    CHECK(null.status == 1);
    CHECK(null.output.find("skew: error: /dev/null: has no settings") != std::string::npos);
    Run zero = run("config /dev/zero");
    CHECK(zero.status == 1);
    CHECK(zero.output.find("skew: error: /dev/zero: not a text file") != std::string::npos);
}

TEST_CASE("skew prepare --shard-tokens 0 gives the real range") {
    Run r = run("prepare --input /nonexistent --out /nonexistent-out --shard-tokens 0");
    CHECK(r.status == 2);
    CHECK(r.output.find("not in range 1 to 2147483647") != std::string::npos);
    CHECK(r.output.find("1797693") == std::string::npos);
}

TEST_CASE("skew prepare warns once about documents that are not UTF-8 naming the count and the first file") {
    namespace fs = std::filesystem;
    const fs::path d = skew::test::test_temp_root() / "skew-test-cli-prepare-utf8";
    fs::remove_all(d);
    fs::create_directories(d / "in");
    std::ofstream(d / "in" / "a.txt") << "A document in English.\n";
    std::ofstream(d / "in" / "b.txt", std::ios::binary) << "caf\xe9 one\n";
    std::ofstream(d / "in" / "c.txt", std::ios::binary) << "caf\xe9 two\n";
    std::ofstream(d / "in" / "empty.txt");
    Run r = run("prepare --input " + (d / "in").string() + " --out " + (d / "out").string() + " --tokenizer " +
                std::string(SKEW_SOURCE_DIR) + "/tests/fixtures/data/gpt2 --no-progress --val-ratio 0.001");
    CHECK(r.status == 0);
    CHECK(r.output.find("2 documents are not valid UTF-8 (the first: " + (d / "in" / "b.txt").string() + ")") !=
          std::string::npos);
    CHECK(r.output.find("1 empty documents skipped") != std::string::npos);
    fs::remove_all(d);
}

TEST_CASE("skew plan shows every train.recompute mode with its activations, peak and largest microbatch") {
    // 31,100 MiB (30.37 GiB, 29.60 GiB for the arena after the 0.77 GiB CUDA constant): block's
    // 29.46 GiB fits at microbatch 64, attention's and none's do not
    Run r = run("plan " + paper() + " --optimizer skewadam --microbatch 64 --budget 31100MiB --json");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.output);
    CHECK(j["recompute"] == "block");
    REQUIRE(j["recompute_modes"].size() == 3);
    const auto& block = j["recompute_modes"][0];
    const auto& attention = j["recompute_modes"][1];
    const auto& none = j["recompute_modes"][2];
    CHECK(block["recompute"] == "block");
    CHECK(attention["recompute"] == "attention");
    CHECK(none["recompute"] == "none");
    CHECK(block["peak"]["bytes"] == j["peak"]["bytes"]);
    CHECK(block["activations"]["bytes"] == j["activations"]["bytes"]);
    // two blocks (one dense, one MoE) at 64 x 128 = 8,192 tokens, d 4096, 32/8 heads of 128: attention
    // keeps one more copy of LN1 out, q, resid1, LN2 out (N d bf16 each), k and v (N 1024 bf16) and
    // the four LayerNorm statistics (N fp32); none also the attention output (N d bf16) and the
    // logsumexp (64 x 32 x 128 fp32)
    const int64_t N = 8192, d = 4096;
    const int64_t attention_extra = 4 * N * d * 2 + 2 * N * 1024 * 2 + 4 * N * 4;
    const int64_t core = N * d * 2 + 64 * 32 * 128 * 4;
    // Laid out, a slot the backward recomputes shares the LM head's bytes (dead during the head): block
    // mode's working slots and attention mode's core, at most the head's logits chunk and its
    // companions (under 200 MiB here); none shares nothing, so it differs from block by at least the
    // declared extra copies less that.
    const int64_t head_share_max = int64_t(200) << 20;
    const int64_t act_block = block["activations"]["bytes"].get<int64_t>();
    const int64_t act_attention = attention["activations"]["bytes"].get<int64_t>();
    const int64_t act_none = none["activations"]["bytes"].get<int64_t>();
    CHECK(act_attention - act_block >= attention_extra - head_share_max);
    CHECK(act_attention - act_block <= attention_extra + head_share_max);
    CHECK(act_none - act_attention >= core - head_share_max);
    CHECK(act_none - act_block >= attention_extra + core - head_share_max);
    CHECK(act_none - act_block <= attention_extra + core + head_share_max);
    CHECK(none["peak"]["bytes"].get<int64_t>() - block["peak"]["bytes"].get<int64_t>() == act_none - act_block);
    CHECK(block["largest_microbatch"] == 64);
    CHECK(attention["largest_microbatch"] == 32);
    CHECK(none["largest_microbatch"] == 32);
    Run text = run("plan " + paper() + " --optimizer skewadam --microbatch 64 --set train.recompute=none");
    REQUIRE(text.status == 0);
    CHECK(text.output.find("| activations (microbatch 64, train.recompute: none) | 2.90 GiB |") != std::string::npos);
    CHECK(text.output.find("| attention | 2,869.5 MiB | 29.74 GiB |") != std::string::npos);
    CHECK(text.output.find("| none | 2,967.6 MiB | 29.84 GiB |") != std::string::npos);
}

TEST_CASE("skew plan shows both train.expert_grads modes side by side with the largest microbatch of each") {
    Run r = run("plan " + paper() + " --optimizer skewadam --microbatch 64 --budget 24GiB --json");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.output);
    REQUIRE(j["expert_grad_modes"].size() == 2);
    const auto& stored = j["expert_grad_modes"][0];
    const auto& deferred = j["expert_grad_modes"][1];
    CHECK(stored["expert_grads"] == "stored");
    CHECK(deferred["expert_grads"] == "deferred");
    CHECK(stored["peak"]["bytes"] == j["peak"]["bytes"]);  // the config's mode is stored
    // deferred: the three bf16 expert banks (3 x 128 x 4096 x 4096) give way to the kept operands of
    // the batch's 8,192 tokens x top-2 (2 NK (2 d + 3 d_expert) bf16 bytes, one MoE block)
    const int64_t banks = 3LL * 128 * 4096 * 4096 * 2, kept = 2LL * 16384 * (2 * 4096 + 3 * 4096);
    CHECK(deferred["gradients"]["bytes"].get<int64_t>() == stored["gradients"]["bytes"].get<int64_t>() - banks + kept);
    CHECK(std::round(stored["peak"]["gib"].get<double>() * 100) / 100 == Approx(29.46));
    // the paper model in 18 GiB at microbatch 64, the CUDA context and libraries included
    CHECK(std::round(deferred["peak"]["gib"].get<double>() * 100) / 100 == Approx(17.21));
    CHECK(deferred["device_total"]["bytes"].get<int64_t>() ==
          deferred["peak"]["bytes"].get<int64_t>() + j["cuda_runtime_overhead"]["bytes"].get<int64_t>());
    CHECK(deferred["device_total"]["gib"].get<double>() <= 18.0);
    CHECK(stored["largest_microbatch"] == 0);  // nothing fits 24 GiB with stored gradients
    CHECK(deferred["largest_microbatch"] == 64);
    // the budget is the device's: 17.98 GiB of device total does not fit 17.9 GiB (17.21 of arena would)
    Run tight = run("plan " + paper() + " --optimizer skewadam --microbatch 64 --budget 17.9GiB --json");
    REQUIRE(tight.status == 0);
    CHECK(nlohmann::json::parse(tight.output)["expert_grad_modes"][1]["largest_microbatch"] == 32);
    Run text = run("plan " + paper() + " --optimizer skewadam --microbatch 16 --budget 24GiB");
    REQUIRE(text.status == 0);
    // the paper model in 16 GiB of arena at microbatch 16 (the fused head in 640-token chunks of
    // logits with every token's bf16 dlogits: 335 MB where one chunk would be 618 MB)
    CHECK(text.output.find("| deferred | 1.26 GiB | 0.44 GiB | 15.91 GiB | 16.68 GiB | 64 |") != std::string::npos);
    Run mb16 =
        run("plan " + paper() + " --optimizer skewadam --microbatch 16 --json --set train.expert_grads=deferred");
    REQUIRE(mb16.status == 0);
    CHECK(nlohmann::json::parse(mb16.output)["peak"]["gib"].get<double>() <= 16.0);
}

TEST_CASE("skew plan adds the documented CUDA context and library constant to the arena for the device total") {
    Run r = run("plan " + paper() + " --optimizer skewadam --json");
    REQUIRE(r.status == 0);
    auto j = nlohmann::json::parse(r.output);
    REQUIRE(j["backend"] == "cuda");
    const int64_t overhead = j["cuda_runtime_overhead"]["bytes"].get<int64_t>();
    CHECK(overhead == int64_t(0.77 * 1024.0 * 1024.0 * 1024.0));  // the H200 measurement at CUDA 13
    CHECK(j["device_total"]["bytes"].get<int64_t>() == j["peak"]["bytes"].get<int64_t>() + overhead);
    Run cpu = run("plan " + paper() + " --optimizer skewadam --json --set runtime.backend=cpu");
    REQUIRE(cpu.status == 0);
    CHECK_FALSE(nlohmann::json::parse(cpu.output).contains("cuda_runtime_overhead"));  // no CUDA context on the CPU
}

TEST_CASE(
    "skew plan --world-size: per-rank state under ZeRO-1 sums to the one-process state, the paper model fits "
    "24 GB per GPU with SkewAdam on 8 GPUs x expert parallel 8 and 40 GB with AdamW + ZeRO-1 on 8") {
    // tiny config, AdamW keeps 8 bytes per parameter: the ranks' shares add up to 8 x the parameter count
    for (int n : {2, 4}) {
        Run r =
            run("plan " + std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml --optimizer adamw --json --world-size " +
                std::to_string(n) + " --set train.batch_size=8 --set train.microbatch=1");
        INFO(r.output);
        REQUIRE(r.status == 0);
        auto j = nlohmann::json::parse(r.output);
        REQUIRE(j["ranks"].size() == size_t(n));
        int64_t sum = 0, largest = 0;
        for (auto& rk : j["ranks"]) {
            sum += rk["state_bytes"].get<int64_t>();
            largest = std::max(largest, rk["state_bytes"].get<int64_t>());
        }
        CHECK(sum == 8 * j["params"]["total"].get<int64_t>());
        CHECK(j["state"]["bytes"].get<int64_t>() == largest);  // the plan shown is the largest rank's
    }
    Run s = run("plan " + paper() +
                " --optimizer skewadam --world-size 8 --expert-parallel 8 --budget 24GiB --json "
                "--set parallel.zero_stage=0");
    REQUIRE(s.status == 0);
    auto js = nlohmann::json::parse(s.output);
    CHECK(js["budget"]["fits"] == true);
    CHECK(std::round(js["weights"]["gib"].get<double>() * 100) / 100 == Approx(2.14));  // 1/8 of the experts
    CHECK(std::round(js["peak"]["gib"].get<double>() * 100) / 100 == Approx(7.17));     // docs/distributed.md
    Run a = run("plan " + paper() + " --optimizer adamw --world-size 8 --budget 40GB --json");
    REQUIRE(a.status == 0);
    auto ja = nlohmann::json::parse(a.output);
    CHECK(ja["budget"]["fits"] == true);
    CHECK(std::round(ja["state"]["gib"].get<double>() * 100) / 100 == Approx(7.54));
    CHECK(std::round(ja["peak"]["gib"].get<double>() * 100) / 100 == Approx(33.39));
    Run a0 =
        run("plan " + paper() + " --optimizer adamw --world-size 8 --budget 40GB --json --set parallel.zero_stage=0");
    REQUIRE(a0.status == 0);
    CHECK(nlohmann::json::parse(a0.output)["budget"]["fits"] == false);  // replicated state does not fit
}

// The published families' configs (docs/architectures.md): their parameter counts equal the published
// checkpoints' (OLMoE-1B-7B 6,919,161,856; Qwen3-30B-A3B 30,532,122,624, its safetensors index's
// total_size / 2; Mixtral 8x7B 46,702,792,704), and the device counts of the plan that
// docs/architectures.md, "Configs and what they plan", states (docs/gpu-status.md's status table repeats
// them): on 24 GB devices OLMoE-1B-7B trains with SkewAdam on 2 (expert parallel 2) where AdamW needs 8;
// Qwen3-30B-A3B trains with SkewAdam on one 141 GB H200 where AdamW needs 4.
TEST_CASE(
    "the OLMoE, Qwen3 and Mixtral configs plan their published parameter counts and the device counts of "
    "docs/architectures.md") {
    auto plan = [](const std::string& config, const std::string& args) {
        Run r = run("plan " + std::string(SKEW_SOURCE_DIR) + "/configs/" + config + " --json " + args);
        INFO(r.output);
        REQUIRE(r.status == 0);
        return nlohmann::json::parse(r.output);
    };
    CHECK(plan("olmoe-1b-7b.yaml", "")["params"]["total"].get<int64_t>() == 6919161856);
    CHECK(plan("qwen3-30b-a3b.yaml", "")["params"]["total"].get<int64_t>() == 30532122624);
    CHECK(plan("mixtral-8x7b.yaml", "")["params"]["total"].get<int64_t>() == 46702792704);
    auto fits = [&](const std::string& config, const std::string& opt, int ranks, const char* budget) {
        const std::string par =
            ranks > 1 ? " --world-size " + std::to_string(ranks) + " --expert-parallel " + std::to_string(ranks) : "";
        return plan(config, "--optimizer " + opt + par + " --budget " + budget)["budget"]["fits"].get<bool>();
    };
    CHECK_FALSE(fits("olmoe-1b-7b.yaml", "skewadam", 1, "24GB"));
    CHECK(fits("olmoe-1b-7b.yaml", "skewadam", 2, "24GB"));
    CHECK_FALSE(fits("olmoe-1b-7b.yaml", "adamw", 4, "24GB"));
    CHECK(fits("olmoe-1b-7b.yaml", "adamw", 8, "24GB"));
    CHECK(fits("qwen3-30b-a3b.yaml", "skewadam", 1, "141GB"));
    CHECK_FALSE(fits("qwen3-30b-a3b.yaml", "adamw", 2, "141GB"));
    CHECK(fits("qwen3-30b-a3b.yaml", "adamw", 4, "141GB"));
}
