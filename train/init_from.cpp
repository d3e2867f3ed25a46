// train.init_from: the checks before a run and the weights loaded in place of model_init.
#include "train/init_from.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/tensor_scan.h"
#include "engine/config_schema.h"
#include "engine/error.h"

namespace fs = std::filesystem;

namespace skew {

void check_init_from(const Config& cfg) {
    const std::string& dir = cfg.train.init_from;
    if (dir.empty()) return;
    const ImportFolder folder{dir};
    const fs::path config_path = folder.config(), weights = folder.weights();
    if (!fs::is_directory(dir))
        fail("train.init_from {}: no such folder (give the folder `skew import HF_DIR --out DIR` wrote)", dir);
    for (const fs::path& p : {config_path, weights})
        if (!fs::exists(p))
            fail("train.init_from {}: {} is missing (is it a folder `skew import` wrote?)", dir, p.string());
    if (cfg.parallel.expert > 1)
        fail(
            "train.init_from {}: parallel.expert is {}; a run from imported weights runs with parallel.expert 1 (data "
            "parallel and ZeRO-1 are fine)",
            dir, cfg.parallel.expert);
    const Config imported = load_config(config_path.string());
    const auto now = config_section_values(cfg, "model"), was = config_section_values(imported, "model");
    for (size_t i = 0; i < now.size() && i < was.size(); ++i)
        if (now[i] != was[i])
            fail(
                "{}: model.{} is {} but the weights in {} (train.init_from) are of a model with {}: start from {}'s "
                "model section",
                cfg.source.empty() ? "the config" : cfg.source, now[i].first, now[i].second, dir, was[i].second,
                config_path.string());
}

void load_init_weights(const std::string& dir, const Arena& arena, Backend* backend) {
    const std::string path = ImportFolder{dir}.weights();
    const std::vector<NamedTensor> tensors = weight_tensors(arena, backend);
    read_safetensors_into(path, tensors);
    if (const auto bad = first_non_finite(tensors))
        fail("{}: tensor '{}' holds a non-finite value at {}", path, bad->tensor, shape_text(bad->coords));
}

}  // namespace skew
