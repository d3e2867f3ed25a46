// `skew eval` and `skew sample` end to end on a tiny run trained on committed text: perplexity
// equals the trainer's own evaluation of the same batches, the four task formats are scored and
// written to eval_<optimizer>.json (and shown by `skew report`), sampling is reproducible, a long
// prompt is cut on the left and said so, bad input is refused with one clear line.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using skew::test::Run;

namespace {

Run run(const std::string& args) { return skew::test::run_skew(args); }

std::string src(const std::string& rel) { return std::string(SKEW_SOURCE_DIR) + "/" + rel; }

// A tiny adamw run (4 steps, evaluation of 2 validation batches at step 4), trained once.
const std::string& run_dir() {
    static const std::string dir = [] {
        const std::string work = (fs::temp_directory_path() / ("skew-eval-test-" + std::to_string(getpid()))).string();
        fs::remove_all(work);
        fs::create_directories(work);
        Run p = run("prepare --input " + src("tests/fixtures/train/sample.jsonl") + " --out " + work +
                    "/prep --tokenizer " + src("tests/fixtures/data/gpt2") + " --no-progress");
        INFO(p.output);
        REQUIRE(p.status == 0);
        Run t = run(
            "train " + src("configs/tiny.yaml") + " --plain --optimizers adamw --out " + work +
            "/run --set data.dir=" + work + "/prep --set data.tokenizer_dir=" + src("tests/fixtures/data/gpt2") +
            " --set train.steps=4 --set train.eval_every=4 --set train.checkpoint_every=4 --set train.eval_batches=2");
        INFO(t.output);
        REQUIRE(t.status == 0);
        return work + "/run";
    }();
    return dir;
}

std::string prep_dir() { return fs::path(run_dir()).parent_path().string() + "/prep"; }

json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return json::parse(in);
}

// The JSON document of a command's output (log lines on stderr come before it).
json json_of(const std::string& output) {
    const size_t at = output.rfind("\n{") != std::string::npos && output.front() != '{' ? output.find("\n{") + 1 : 0;
    return json::parse(output.substr(at));
}

std::string task_args() {
    std::string a;
    for (const char* t : {"piqa", "winogrande", "hellaswag", "arc"})
        a += " --task " + src(std::string("tests/fixtures/eval/") + t + ".jsonl") + " --format " + t;
    return a;
}

}  // namespace

TEST_CASE("skew eval --data gives the trainer's validation loss for the same batches, bit for bit", "[eval][cli]") {
    Run r = run("eval " + run_dir() + " --optimizer adamw --data " + prep_dir() + " --batches 2 --json --no-write");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const json out = json_of(r.output);
    const json metrics = read_json(run_dir() + "/metrics_adamw.json");
    const json& last = metrics["history"].back();
    CHECK(out["perplexity"]["loss"].get<double>() == last["val_loss"].get<double>());
    CHECK(out["perplexity"]["perplexity"].get<double>() == Approx(last["val_ppl"].get<double>()).epsilon(1e-12));
    CHECK(out["perplexity"]["tokens"] == 2 * 8 * 32);
    CHECK(out["step"] == 4);
    CHECK(out["optimizer"] == "adamw");
}

TEST_CASE("skew eval scores the four task formats, writes eval_<optimizer>.json, and skew report shows Table 9",
          "[eval][cli]") {
    Run r = run("eval " + run_dir() + task_args() + " --batch-size 3");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("hellaswag") != std::string::npos);
    const json out = read_json(run_dir() + "/eval_adamw.json");
    CHECK(out["tasks"]["piqa"]["n"] == 3);
    CHECK(out["tasks"]["winogrande"]["n"] == 5);
    CHECK(out["tasks"]["hellaswag"]["n"] == 4);
    CHECK(out["tasks"]["arc"]["n"] == 3);
    CHECK(out["tasks"]["arc"]["requests"] == 12);
    CHECK(out["tasks"]["piqa"]["truncated_requests"] == 0);
    for (const auto& [name, t] : out["tasks"].items()) {
        const double acc = t["acc"].get<double>();
        CHECK(acc >= 0.0);
        CHECK(acc <= 1.0);
    }
    // the same scores on another batch size (right padding changes nothing scored)
    Run r2 = run("eval " + run_dir() + task_args() + " --batch-size 1 --json --no-write");
    REQUIRE(r2.status == 0);
    const json out2 = json_of(r2.output);
    for (const char* t : {"piqa", "winogrande", "hellaswag", "arc"}) {
        INFO(t);
        CHECK(out2["tasks"][t]["acc"] == out["tasks"][t]["acc"]);
        CHECK(out2["tasks"][t]["acc_norm"] == out["tasks"][t]["acc_norm"]);
    }
    // a later --data run keeps the task results of the same checkpoint
    Run p = run("eval " + run_dir() + " --data " + prep_dir() + " --batches 1");
    REQUIRE(p.status == 0);
    const json merged = read_json(run_dir() + "/eval_adamw.json");
    CHECK(merged.contains("perplexity"));
    CHECK(merged["tasks"].contains("arc"));

    Run rep = run("report " + run_dir());
    INFO(rep.output);
    REQUIRE(rep.status == 0);
    CHECK(rep.output.find("Zero-shot") != std::string::npos);
    CHECK(rep.output.find("HellaSwag") != std::string::npos);
}

TEST_CASE("skew eval refuses a malformed task line naming file and line, and unmatched --task/--format",
          "[eval][cli]") {
    const std::string bad = (fs::temp_directory_path() / "skew_eval_cli_bad.jsonl").string();
    std::ofstream(bad) << "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n{\"goal\": \"g\"}\n";
    Run r = run("eval " + run_dir() + " --task " + bad + " --format piqa --no-write");
    CHECK(r.status == 1);
    CHECK(r.output.find("skew_eval_cli_bad.jsonl:2: missing field 'sol1'") != std::string::npos);
    Run m = run("eval " + run_dir() + " --task " + bad + " --no-write");
    CHECK(m.status == 1);
    CHECK(m.output.find("one --format per --task") != std::string::npos);
    Run n = run("eval " + run_dir() + " --optimizer lion --data " + prep_dir());
    CHECK(n.status == 1);
    CHECK(n.output.find("no checkpoints of optimizer 'lion'") != std::string::npos);
}

TEST_CASE("skew sample: the same seed gives the same text, greedy is top-k 1, a long prompt is cut on the left",
          "[eval][cli]") {
    const std::string base = "sample " + run_dir() + " --prompt 'The history of' --max-tokens 8 --json";
    Run a = run(base + " --seed 3 --num-samples 2");
    INFO(a.output);
    REQUIRE(a.status == 0);
    Run b = run(base + " --seed 3 --num-samples 2");
    const json ja = json_of(a.output), jb = json_of(b.output);
    REQUIRE(ja["samples"].size() == 2);
    CHECK(ja["samples"] == jb["samples"]);
    CHECK(ja["samples"][0]["tokens"].size() >= 1);
    const json g = json_of(run(base + " --temperature 0").output);
    const json k1 = json_of(run(base + " --top-k 1 --seed 9").output);
    CHECK(g["samples"][0]["tokens"] == k1["samples"][0]["tokens"]);

    // standard input, less its final newline, is the same prompt
    const std::string in = (fs::temp_directory_path() / "skew_sample_prompt.txt").string();
    std::ofstream(in) << "The history of\n";
    const json from_stdin =
        json_of(run("sample " + run_dir() + " --max-tokens 8 --json --temperature 0 < " + in).output);
    CHECK(from_stdin["samples"][0]["tokens"] == g["samples"][0]["tokens"]);
    CHECK(from_stdin["prompt"] == "The history of");

    std::string long_prompt;
    for (int i = 0; i < 40; ++i) long_prompt += "one two ";  // 80 tokens; tiny.yaml has 64 positions
    Run l = run("sample " + run_dir() + " --prompt '" + long_prompt + "' --max-tokens 4 --json");
    INFO(l.output);
    REQUIRE(l.status == 0);
    CHECK(l.output.find("tokens were dropped") != std::string::npos);
    const json jl = json_of(l.output);
    CHECK(jl["prompt_tokens"] == 63);
    CHECK(jl["prompt_tokens_dropped"] == 18);       // 81 tokens (a trailing space) - 63
    CHECK(jl["samples"][0]["tokens"].size() == 2);  // read at position 63 (the last), then one from its logits
    CHECK(jl["samples"][0]["stop"] == "max_seq_len");

    Run s = run("sample " + run_dir() + " --prompt hi --top-p 0");
    CHECK(s.status == 2);  // a flag out of its range is a usage error
    CHECK(s.output.find("--top-p") != std::string::npos);
}

TEST_CASE("skew eval and sample refuse a tokenizer, or a dataset tokenized by one, other than the run's",
          "[eval][cli]") {
    // Another tokenizer: GPT-2's files less the last merge ("Ġg azed"), so " gazed" is two tokens.
    const fs::path work = fs::path(run_dir()).parent_path(), other = work / "other-tokenizer";
    fs::create_directories(other);
    fs::copy_file(src("tests/fixtures/data/gpt2/encoder.json"), other / "encoder.json",
                  fs::copy_options::overwrite_existing);
    {
        std::ifstream in(src("tests/fixtures/data/gpt2/vocab.bpe"));
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t last = text.rfind("Ġg azed");
        REQUIRE(last != std::string::npos);
        std::ofstream(other / "vocab.bpe") << text.substr(0, last);
    }
    Run t = run("eval " + run_dir() + " --optimizer adamw --no-write --tokenizer " + other.string() + " --task " +
                src("tests/fixtures/eval/piqa.jsonl") + " --format piqa");
    INFO(t.output);
    CHECK(t.status == 1);
    CHECK(t.output.find("skew: error: --tokenizer " + other.string() +
                        ": not the tokenizer this run was trained with: its vocab.bpe differs") != std::string::npos);
    Run s = run("sample " + run_dir() + " --prompt hi --max-tokens 2 --tokenizer " + other.string());
    CHECK(s.status == 1);
    CHECK(s.output.find("skew: error: --tokenizer " + other.string() + ": not the tokenizer") != std::string::npos);
    // Shards prepared by that tokenizer: refused for --data, naming both manifests.
    Run p = run("prepare --input " + src("tests/fixtures/train/sample.jsonl") + " --out " +
                (work / "other-prep").string() + " --tokenizer " + other.string() + " --no-progress");
    REQUIRE(p.status == 0);
    Run d = run("eval " + run_dir() + " --optimizer adamw --no-write --data " + (work / "other-prep").string());
    INFO(d.output);
    CHECK(d.status == 1);
    CHECK(d.output.find("skew: error: --data " + (work / "other-prep").string() +
                        ": its shards were tokenized by another tokenizer than the run's") != std::string::npos);
    CHECK(d.output.find("its vocab.bpe differs by MD5 from the run's") != std::string::npos);
    // A tokenizer of another kind (a tokenizer.json): refused naming both kinds.
    Run k =
        run("sample " + run_dir() + " --prompt hi --max-tokens 2 --tokenizer " + src("tests/fixtures/data/hf_tiny"));
    INFO(k.output);
    CHECK(k.status == 1);
    CHECK(k.output.find(
              "not the tokenizer this run was trained with: it is a hf-byte-level-bpe tokenizer (tokenizer.json), "
              "the one " +
              run_dir() + "/manifest.json records is gpt2-bpe") != std::string::npos);
    // The run's own tokenizer and data still pass.
    CHECK(run("eval " + run_dir() + " --optimizer adamw --no-write --batches 1 --data " + prep_dir()).status == 0);
}

TEST_CASE("skew eval, sample and export refuse a config.yaml whose model settings differ from the checkpoint's",
          "[eval][cli]") {
    // model.top_k changes the computation but no tensor's shape: without the check the weights would
    // be evaluated as another model, silently.
    const fs::path work = fs::path(run_dir()).parent_path(), edited = work / "edited-run";
    fs::remove_all(edited);
    fs::copy(run_dir(), edited, fs::copy_options::recursive);
    const fs::path config = edited / "config.yaml";
    std::string text;
    {
        std::ifstream in(config);
        text.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    const size_t at = text.find("top_k: 2");
    REQUIRE(at != std::string::npos);
    std::ofstream(config) << text.substr(0, at) + "top_k: 1" + text.substr(at + 8);
    const std::string expect =
        config.string() + ": model.top_k is 1 but the checkpoint " + edited.string() + "/checkpoints/adamw/";
    Run e = run("eval " + edited.string() + " --optimizer adamw --no-write --batches 1 --data " + prep_dir());
    INFO(e.output);
    CHECK(e.status == 1);
    CHECK(e.output.find("skew: error: " + expect) != std::string::npos);
    CHECK(e.output.find("was trained with 2") != std::string::npos);
    Run s = run("sample " + edited.string() + " --prompt hi --max-tokens 2");
    CHECK(s.status == 1);
    CHECK(s.output.find(expect) != std::string::npos);
    Run x = run("export " + edited.string() + " --optimizer adamw --out " + (work / "edited.safetensors").string());
    CHECK(x.status == 1);
    CHECK(x.output.find(expect) != std::string::npos);
    CHECK(!fs::exists(work / "edited.safetensors"));
    // A checkpoint from before skew recorded its model settings: compared by config hash, a warning.
    for (const char* which : {"last", "best"}) {
        const fs::path state = edited / "checkpoints" / "adamw" / which / "trainer_state.json";
        if (!fs::exists(state)) continue;
        json j = read_json(state.string());
        REQUIRE(j.contains("model"));
        CHECK(j["model"]["top_k"] == "2");
        j.erase("model");
        std::ofstream(state) << j.dump(2);
    }
    Run old = run("eval " + edited.string() + " --optimizer adamw --no-write --batches 1 --data " + prep_dir());
    INFO(old.output);
    CHECK(old.status == 0);
    CHECK(old.output.find("not the config the checkpoint") != std::string::npos);
    // The run's own config passes without a warning.
    Run own = run("eval " + run_dir() + " --optimizer adamw --no-write --batches 1 --data " + prep_dir());
    CHECK(own.status == 0);
    CHECK(own.output.find("not the config the checkpoint") == std::string::npos);
}

TEST_CASE("skew eval and sample name a path of the wrong kind and refuse flags the command would ignore",
          "[eval][cli]") {
    const std::string readme = src("README.md");
    const fs::path dir = fs::path(run_dir()).parent_path() / "a-folder";
    fs::create_directories(dir);
    Run task = run("eval " + run_dir() + " --no-write --task " + dir.string() + " --format piqa");
    CHECK(task.status == 1);
    CHECK(task.output.find(dir.string() + ": is a folder; --task takes a JSONL task file") != std::string::npos);
    Run ck = run("eval " + readme + " --data " + prep_dir());
    CHECK(ck.status == 1);
    CHECK(ck.output.find(
              readme +
              ": is a file, not a folder (give a run folder, a checkpoint folder or a folder `skew import` wrote)") !=
          std::string::npos);
    Run tok = run("sample " + run_dir() + " --prompt hi --max-tokens 1 --tokenizer " + readme);
    CHECK(tok.status == 1);
    CHECK(tok.output.find("--tokenizer " + readme + ": is a file, not a tokenizer folder") != std::string::npos);
    // --tokenizer and --batch-size serve --task only; --split and --batches serve --data only
    Run ignored = run("eval " + run_dir() + " --no-write --data " + prep_dir() + " --tokenizer " + readme);
    CHECK(ignored.status == 2);
    CHECK(ignored.output.find("--tokenizer: is for --task scoring; without --task it would be ignored") !=
          std::string::npos);
    CHECK(run("eval " + run_dir() + " --no-write --data " + prep_dir() + " --batch-size 4").status == 2);
    Run split = run("eval " + run_dir() + " --no-write --task " + src("tests/fixtures/eval/piqa.jsonl") +
                    " --format piqa --split train");
    CHECK(split.status == 2);
    CHECK(split.output.find("--split: is for --data perplexity; without --data it would be ignored") !=
          std::string::npos);
    Run resume = run("train --resume " + readme);
    CHECK(resume.status == 1);
    CHECK(resume.output.find("--resume " + readme + ": is a file, not a run folder") != std::string::npos);
}
