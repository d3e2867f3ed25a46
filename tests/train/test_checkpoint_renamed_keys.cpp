// A run made before a key was renamed or added still resumes (docs/architectures.md, model.norm_eps):
// its checkpoint's model record names model.layernorm_eps, which check_model_config compares as
// model.norm_eps, and its config.yaml, unedited, hashes to its checkpoints' config_hash though the
// same settings now resolve to other text (config_hash_matches).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "engine/config.h"
#include "engine/error.h"
#include "tests/temp_dir.h"

using namespace skew;
namespace fs = std::filesystem;

TEST_CASE("a checkpoint's model record under layernorm_eps is the norm_eps of today's config") {
    const Config c = load_config_text("model:\n  norm_eps: 1e-05\n", "config.yaml");
    CHECK_NOTHROW(
        check_model_config(c, {{"layernorm_eps", "1e-05"}, {"d_model", "4096"}}, "config.yaml", "ckpt", "fix"));
    CHECK_THROWS_WITH(check_model_config(c, {{"layernorm_eps", "2e-05"}}, "config.yaml", "ckpt", "fix"),
                      "config.yaml: model.norm_eps is 1e-05 but the checkpoint ckpt was trained with 2e-05: fix");
}

TEST_CASE("an unedited config.yaml written before a schema change matches its checkpoints' hash") {
    const std::string dir = (skew::test::test_temp_root() / "renamed-keys").string();
    fs::create_directories(dir);
    const std::string path = dir + "/config.yaml";
    // as an older skew wrote it: the former key name, none of today's newer keys
    const std::string written = "model:\n  d_model: 64\n  layernorm_eps: 1e-05\ntrain:\n  steps: 5";
    std::ofstream(path) << written << "\n";
    const Config c = load_config(path);
    CHECK(config_hash(c.resolved_yaml) != config_hash(written));  // today's resolved text differs
    CHECK(config_hash_matches(c, path, config_hash(written)));
    CHECK(config_hash_matches(c, path, config_hash(c.resolved_yaml)));
    CHECK_FALSE(config_hash_matches(c, path, config_hash(written + " ")));  // an edited file does not
    CHECK_FALSE(config_hash_matches(c, dir + "/missing.yaml", config_hash(written)));
}
