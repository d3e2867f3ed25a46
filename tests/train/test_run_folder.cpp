// The names of a run folder's, a checkpoint folder's, an import folder's and a Hugging Face folder's files
// (checkpoint/run_folder.h): the exact paths run folders already on disk use, so that every
// reader and writer that asks for them finds what earlier runs wrote (docs/training.md).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "checkpoint/run_folder.h"
#include "train_test_util.h"

using namespace skew;
namespace fs = std::filesystem;

TEST_CASE("a run folder names its files as runs on disk hold them") {
    const RunFolder run{"runs/quickstart"};
    CHECK(run.config() == "runs/quickstart/config.yaml");
    CHECK(run.data_manifest() == "runs/quickstart/manifest.json");
    CHECK(run.data_identity() == "runs/quickstart/data_identity.json");
    CHECK(run.step_log("adamw") == "runs/quickstart/steps_adamw.jsonl");
    CHECK(run.metrics("skewadam-expert-momentum") == "runs/quickstart/metrics_skewadam-expert-momentum.json");
    CHECK(run.eval_results("muon") == "runs/quickstart/eval_muon.json");
    CHECK(run.checkpoints() == "runs/quickstart/checkpoints");
    CHECK(run.optimizer_checkpoints("lion") == "runs/quickstart/checkpoints/lion");
    CHECK(run.checkpoint("lion", RunFolder::LAST) == "runs/quickstart/checkpoints/lion/last");
    CHECK(run.checkpoint("lion", RunFolder::BEST) == "runs/quickstart/checkpoints/lion/best");
    CHECK(std::string(RunFolder::LOCK_FILE) == ".skew-train.lock");
    // a folder given with a trailing separator joins as std::filesystem does
    CHECK(RunFolder{"runs/a/"}.config() == "runs/a/config.yaml");
}

TEST_CASE("a metrics or eval file's name gives its optimizer, any other name none") {
    CHECK(RunFolder::metrics_optimizer("metrics_adamw.json") == "adamw");
    CHECK(RunFolder::metrics_optimizer("metrics_galore-paper.json") == "galore-paper");
    CHECK_FALSE(RunFolder::metrics_optimizer("metrics_.json"));
    CHECK_FALSE(RunFolder::metrics_optimizer("metrics_adamw.jsonl"));
    CHECK_FALSE(RunFolder::metrics_optimizer("steps_adamw.jsonl"));
    CHECK_FALSE(RunFolder::metrics_optimizer("config.yaml"));
    // the name it parses is the one it writes
    CHECK(RunFolder::metrics_optimizer(fs::path(RunFolder{"r"}.metrics("muon-kj")).filename().string()) == "muon-kj");
    CHECK(RunFolder::eval_results_optimizer("eval_lion.json") == "lion");
    CHECK_FALSE(RunFolder::eval_results_optimizer("metrics_lion.json"));
    CHECK_FALSE(RunFolder::eval_results_optimizer("eval_lion.json.tmp"));
}

TEST_CASE("a checkpoint folder names its files and the run folder three levels up") {
    const CheckpointFolder ck{"runs/a/checkpoints/adamw/best"};
    CHECK(ck.weights() == "runs/a/checkpoints/adamw/best/model.safetensors");
    CHECK(ck.optimizer_state() == "runs/a/checkpoints/adamw/best/optimizer.safetensors");
    CHECK(ck.trainer_state() == "runs/a/checkpoints/adamw/best/trainer_state.json");
    CHECK(ck.layout() == "runs/a/checkpoints/adamw/best/layout.json");
    CHECK(CheckpointFolder::optimizer_shard_file(1, 4) == "optimizer.rank-1-of-4.safetensors");
    CHECK(CheckpointFolder::expert_state_shard_file(0, 2) == "optimizer.experts-0-of-2.safetensors");
    CHECK(CheckpointFolder::expert_shard_file(1, 2) == "model.experts-1-of-2.safetensors");
    // the run folder as `skew eval` has always named it in messages (normalized, a trailing separator)
    CHECK(ck.run().dir == "runs/a/");
    CHECK(ck.run().config() == "runs/a/config.yaml");
    CHECK(CheckpointFolder{"runs/a/checkpoints/adamw/best/"}.run().config() == "runs/a/config.yaml");
    CHECK(CheckpointFolder{"checkpoints/adamw/last"}.run().config() == "./config.yaml");
}

TEST_CASE("an import folder is told apart from a run folder and a checkpoint folder") {
    const std::string dir = train_test::scratch("run_folder_import");
    const ImportFolder imp{dir};
    CHECK(imp.config() == dir + "/config.yaml");
    CHECK(imp.weights() == dir + "/model.safetensors");
    CHECK(imp.tokenizer() == dir + "/tokenizer");
    CHECK_FALSE(is_import_folder(dir));  // empty
    std::ofstream(imp.config()) << "model: {}\n";
    CHECK_FALSE(is_import_folder(dir));  // no weights
    std::ofstream(imp.weights()) << "x";
    CHECK(is_import_folder(dir));
    fs::create_directories(RunFolder{dir}.checkpoints());
    CHECK_FALSE(is_import_folder(dir));  // a run folder
    fs::remove_all(RunFolder{dir}.checkpoints());
    std::ofstream(CheckpointFolder{dir}.trainer_state()) << "{}";
    CHECK_FALSE(is_import_folder(dir));            // a checkpoint folder
    CHECK_FALSE(is_import_folder(imp.weights()));  // a file
}

TEST_CASE("a Hugging Face folder names its files as the Hub publishes them") {
    const HfFolder hf{"models/Qwen3-30B-A3B"};
    CHECK(hf.config() == "models/Qwen3-30B-A3B/config.json");
    CHECK(hf.generation_config() == "models/Qwen3-30B-A3B/generation_config.json");
    CHECK(hf.weights() == "models/Qwen3-30B-A3B/model.safetensors");
    CHECK(hf.weights_index() == "models/Qwen3-30B-A3B/model.safetensors.index.json");
    // one weights name for skew's own checkpoints and Hugging Face's single-file checkpoints
    CHECK(std::string(HfFolder::WEIGHTS_FILE) == CheckpointFolder::WEIGHTS_FILE);
    CHECK(HfFolder{"models/a/"}.config() == "models/a/config.json");
}
