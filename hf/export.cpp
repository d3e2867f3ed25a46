// skew export --format hf: the parameter table's tensors under the family's names, sliced without
// a copy into write_safetensors (docs/huggingface.md, "Export").
#include "hf/export.h"

#include <unistd.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/param_table.h"
#include "hf/config_map.h"
#include "hf/folder.h"
#include "hf/tensor_map.h"

namespace fs = std::filesystem;

namespace skew::hf {

ExportResult export_hf(const ModelConfig& model, const std::vector<HostTensor>& weights, const std::string& out_dir,
                       const std::string& source, const std::string& tokenizer_dir, const std::string& published_dir) {
    ExportResult r;
    r.family = family_of_model(model, source);
    refuse_existing_output(out_dir, "--out");
    const ParamTable table = build_param_table(model);
    if (weights.size() != table.params.size())
        fail("{}: {} weights for a model of {}", source, weights.size(), table.params.size());
    const std::vector<HfTensor> tensors = hf_tensors(r.family, model, table);
    std::vector<NamedTensor> named;
    for (const HfTensor& t : tensors) {
        const ParamInfo& p = table.params[t.param];
        const HostTensor& w = weights[t.param];
        if (w.name != p.name || w.shape != p.shape || w.dtype != p.dtype)
            fail("{}: weight '{}' is not the table's '{}'", source, w.name, p.name);
        named.push_back(NamedTensor{t.name, p.dtype, t.shape,
                                    const_cast<std::byte*>(w.data.data()) + t.offset * dtype_bytes(p.dtype)});
    }
    nlohmann::json config = hf_config_from_model(model, r.family);
    std::error_code ec;
    const fs::path published_config = HfFolder{published_dir}.config();
    if (!published_dir.empty() && fs::is_regular_file(published_config, ec)) {  // the ids generation stops at
        const nlohmann::json published = read_hf_config(published_config.string());
        for (const std::string& key : generation_token_fields())
            if (published.is_object() && published.contains(key)) {
                config[key] = published[key];
                r.token_fields.push_back(key);
            }
    }
    const std::string temp = begin_checkpoint_folder(out_dir, "export-" + std::to_string(::getpid()));
    try {
        const HfFolder written{temp};
        write_safetensors(written.weights(), named, {{"format", "pt"}});
        write_file_atomic(written.config(), json_text(config) + "\n");
        if (!tokenizer_dir.empty()) r.tokenizer_files = copy_tokenizer_files(tokenizer_dir, temp);
        if (!published_dir.empty())  // generation_config.json as published (config.json is skew's, above)
            r.generation_config = !copy_files(published_dir, temp, {HfFolder::GENERATION_CONFIG_FILE}).empty();
    } catch (...) {
        fs::remove_all(temp, ec);
        throw;
    }
    commit_checkpoint_folder(temp, out_dir);
    r.hf_tensors = int64_t(tensors.size());
    return r;
}

}  // namespace skew::hf
