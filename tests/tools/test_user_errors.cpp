// A new user's mistakes with the `skew` binary, each refused with one line naming the option the user
// typed (not an internal rewrite of it) and a non-zero exit: Ctrl-C during `skew prepare`, a wrong
// --optimizers, --set values that break a rule on another key, --resume with --out, empty or
// negative budgets, --val-ratio values that leave no split, and the quickstart's run folder choice.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/cli_util.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace {

using skew::test::Run;
Run run(const std::string& args) { return skew::test::run_skew(args); }

std::string src() { return SKEW_SOURCE_DIR; }
std::string tiny() { return src() + "/configs/tiny.yaml"; }

fs::path scratch(const std::string& name) {
    const fs::path d = skew::test::test_temp_root() / ("user-errors-" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("Ctrl-C during skew prepare removes its temporaries, lock and the folder it created, says so, exits 130") {
    const fs::path d = scratch("prepare-sigint");
    // About 30 MB of documents: several 8 MB chunks, so the run is still tokenizing when the signal comes.
    {
        std::ofstream f(d / "big.jsonl");
        std::string doc;
        for (int w = 0; w < 300; ++w) doc += "word" + std::to_string(w % 37) + " ";
        for (int i = 0; i < 20000; ++i) f << "{\"text\": \"" << i << " " << doc << "\"}\n";
    }
    const fs::path out = d / "out", log = d / "log.txt";
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string cmd = "exec " + std::string(SKEW_BINARY) + " prepare --input " + (d / "big.jsonl").string() +
                                " --out " + out.string() + " --tokenizer " + src() +
                                "/tests/fixtures/data/gpt2 --no-progress > " + log.string() + " 2>&1";
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    // Wait until the run holds its lock (it is writing into the folder), then interrupt it.
    bool started = false;
    for (int i = 0; i < 600 && !started; ++i) {
        started = fs::exists(out / ".skew-prepare.lock");
        if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (started) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    REQUIRE(::kill(pid, SIGINT) == 0);
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    const std::string text = read_file(log);
    INFO(text);
    REQUIRE(started);
    REQUIRE(WIFEXITED(st));  // not killed by the signal: it cleaned up and exited
    CHECK(WEXITSTATUS(st) == 130);
    CHECK(contains(text, "skew: error: prepare: interrupted before the shards were complete; nothing was placed into " +
                             out.string()));
    CHECK(contains(text, "the folder this run created was removed"));
    CHECK_FALSE(fs::exists(out));
    // A rerun into the same folder is accepted and completes (a small input this time).
    Run again = run("prepare --input " + src() + "/tests/fixtures/train/sample.jsonl --out " + out.string() +
                    " --tokenizer " + src() + "/tests/fixtures/data/gpt2 --no-progress");
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(fs::exists(out / "manifest.json"));
    CHECK_FALSE(fs::exists(out / ".skew-prepare.lock"));
}

TEST_CASE("a wrong --optimizers is reported as --optimizers, not as the --set it stands for") {
    const fs::path d = scratch("optimizers");
    Run r = run("train " + tiny() + " --optimizers nope --out " + (d / "run").string());
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(contains(r.output, "skew: error: --optimizers nope: train.optimizers: unknown optimizer 'nope'"));
    CHECK_FALSE(contains(r.output, "--set train.optimizers"));
    Run twice = run("train " + tiny() + " --optimizers adamw,adamw --out " + (d / "run").string());
    CHECK(contains(twice.output, "skew: error: --optimizers adamw,adamw: train.optimizers: 'adamw' is listed twice"));
    CHECK_FALSE(fs::exists(d / "run"));
}

TEST_CASE("a --set value that breaks a rule on another key names the --set option, not the file's line") {
    Run r = run("config " + tiny() + " --set model.d_model=65");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(contains(r.output,
                   "skew: error: --set model.d_model=65: model.n_heads: d_model (65) must be divisible by n_heads "
                   "(4) (model.n_heads is set at " +
                       tiny() + ":7:12)"));
    Run b = run("config " + tiny() + " --set train.batch_size=6");
    CHECK(
        contains(b.output,
                 "skew: error: --set train.batch_size=6: train.microbatch: microbatch (4) must divide batch_size (6)"));
    Run e = run("config " + tiny() + " --set model.n_experts=1");
    CHECK(contains(e.output, "skew: error: --set model.n_experts=1: model.top_k:"));
    Run s = run("config " + tiny() + " --set model.max_seq_len=16");
    CHECK(contains(s.output, "skew: error: --set model.max_seq_len=16: train.seq_len:"));
    // The later of two overrides is the one named; a rule broken by the file alone still names its line.
    Run two = run("config " + tiny() + " --set model.n_heads=8 --set model.d_model=36");
    CHECK(contains(two.output, "skew: error: --set model.d_model=36: model.n_heads:"));
    const fs::path d = scratch("set-rule");
    std::ofstream(d / "c.yaml") << "model:\n  d_model: 65\n  n_heads: 4\n";
    Run file = run("config " + (d / "c.yaml").string() + " --set train.steps=5");
    CHECK(contains(file.output, "skew: error: " + (d / "c.yaml").string() + ":3:12: model.n_heads: d_model (65)"));
}

TEST_CASE("skew train --resume with --out is refused naming both, and nothing is written to --out") {
    const fs::path d = scratch("resume-out");
    Run r = run("train --resume " + (d / "old").string() + " --out " + (d / "new").string());
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(contains(r.output, "skew: error: --resume " + (d / "old").string() +
                                 ": continues the run in that folder; --out " + (d / "new").string() +
                                 " is not allowed with it"));
    CHECK_FALSE(fs::exists(d / "new"));
}

TEST_CASE("an empty --budget or --optimizer of skew plan and a non-positive plot_metrics.py --budget are refused") {
    Run empty = run("plan " + tiny() + " --budget ''");
    CHECK(empty.status == 1);
    CHECK(contains(empty.output, "skew: error: --budget: '' is not a size"));
    Run opt = run("plan " + tiny() + " --optimizer ''");
    CHECK(opt.status == 1);
    CHECK(contains(opt.output, "skew: error: --optimizer: empty name"));
    // plot_metrics.py checks its arguments before it needs matplotlib or a run folder.
    for (const std::string& v : {std::string("-5"), std::string("0"), std::string("nan"), std::string("abc")}) {
        Run p = skew::test::run_shell("python3 " + src() + "/tools/plot_metrics.py " + scratch("plot").string() +
                                      " --budget=" + v);
        INFO(v << ": " << p.output);
        CHECK(p.status == 2);
        CHECK(contains(p.output, "argument --budget: "));
    }
}

TEST_CASE("skew prepare refuses a --val-ratio that leaves no validation (or no training) split, naming the bounds") {
    const fs::path d = scratch("val-ratio");
    const std::string args = "prepare --input " + src() + "/tests/fixtures/train/sample.jsonl --out " +
                             (d / "out").string() + " --tokenizer " + src() +
                             "/tests/fixtures/data/gpt2 --no-progress --val-ratio ";
    for (const char* v : {"0", "0.0004"}) {
        Run r = run(args + v);
        INFO(r.output);
        CHECK(r.status == 2);
        CHECK(contains(r.output, std::string("--val-ratio: ") + v + " leaves no validation split"));
        CHECK(contains(r.output, "the smallest is 0.001"));
    }
    Run all = run(args + "1");
    CHECK(all.status == 2);
    CHECK(contains(all.output, "--val-ratio: 1 leaves no training split; the largest is 0.999"));
    CHECK_FALSE(fs::exists(d / "out"));
    CHECK(run(args + "0.001").status == 0);  // one bucket of 1000 is usable
}

TEST_CASE("the quickstart resumes only a run folder of its own config, else picks a fresh folder and says why") {
    const fs::path d = scratch("quickstart-folder");
    const std::string cmd = "bash " + src() + "/scripts/run_folder_for.sh " + SKEW_BINARY + " " + src() +
                            "/configs/quickstart.yaml " + (d / "quickstart").string();
    Run fresh = skew::test::run_shell(cmd);
    CHECK(fresh.status == 0);
    CHECK(fresh.output == (d / "quickstart").string() + "\n");
    fs::create_directories(d / "quickstart");
    // A run of the same config (config.yaml as `skew config` resolves it): resumed.
    CHECK(skew::test::run_shell(SKEW_BINARY + std::string(" config ") + src() + "/configs/quickstart.yaml > " +
                                (d / "quickstart" / "config.yaml").string())
              .status == 0);
    CHECK(skew::test::run_shell(cmd).output == (d / "quickstart").string() + "\n");
    // Another config (or another skew version's resolution): not resumed; a new folder, with the reason.
    CHECK(skew::test::run_shell(SKEW_BINARY + std::string(" config ") + src() +
                                "/configs/quickstart.yaml --set train.steps=3 > " +
                                (d / "quickstart" / "config.yaml").string())
              .status == 0);
    Run other = skew::test::run_shell(cmd);
    INFO(other.output);
    CHECK(other.status == 0);
    CHECK(contains(other.output,
                   "quickstart: not resuming " + (d / "quickstart").string() + ": its config.yaml differs"));
    CHECK(other.output.substr(other.output.size() - (d / "quickstart-2").string().size() - 1) ==
          (d / "quickstart-2").string() + "\n");
}

TEST_CASE("a list key given a bare comma list with --set says how to write the list") {
    Run r = run("config " + tiny() + " --set train.optimizers=skewadam,adamw");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(contains(r.output,
                   "skew: error: --set train.optimizers=skewadam,adamw: train.optimizers: expected list of strings, "
                   "got a scalar; write a list in brackets: [skewadam,adamw]"));
    CHECK(run("config " + tiny() + " --set train.optimizers=[skewadam,adamw]").status == 0);
}

TEST_CASE("skew tokenize on an endless standard input stops with one line instead of exhausting memory") {
    const std::string tok = " --tokenizer " + src() + "/tests/fixtures/data/gpt2";
    Run r = run("tokenize" + tok + " < /dev/zero");
    CHECK(r.status != 0);
    CHECK(r.output.find("tokenize: standard input is larger than 64 MiB; tokenize corpora with `skew prepare`") !=
          std::string::npos);
    // a small input still encodes: "Hello world" is GPT-2 ids 15496 995
    const std::string hello = (skew::test::test_temp_root() / "skew-test-hello.txt").string();
    std::ofstream(hello) << "Hello world";
    Run ok = run("tokenize" + tok + " < " + hello);
    CHECK(ok.status == 0);
    CHECK(ok.output.rfind("15496 995", 0) == 0);
}
