// `skew export RUN --format hf --out DIR` (docs/huggingface.md, "Export"): a run's checkpoint as a
// Hugging Face checkpoint folder of the family its model section is (family_of_model).
#pragma once
#include <string>
#include <vector>

#include "checkpoint/sharded_checkpoint.h"
#include "engine/config.h"
#include "hf/family.h"

namespace skew::hf {

/// What an export wrote.
struct ExportResult {
    Family family = Family::MIXTRAL;
    int64_t hf_tensors = 0;
    std::vector<std::string> tokenizer_files;  // copied from the run's data.tokenizer_dir
    std::vector<std::string> token_fields;  // config.json's bos/eos/pad_token_id taken from the published config.json
    bool generation_config = false;         // generation_config.json copied from the published files
};

/// Write folder `out_dir` (new or empty; written whole into a hidden sibling and swapped in):
/// config.json (hf_config_from_model) and model.safetensors with the family's names (hf_tensors:
/// experts one tensor each, the vocabulary's first vocab_size rows), each tensor in skew's dtype
/// (bf16 matrices, fp32 vectors and router) so that `skew import` of the folder gives back the same
/// bytes; the tokenizer files (folder.h) of `tokenizer_dir` where it holds any; and from
/// `published_dir` (an import's hf/: the checkpoint's config.json and generation_config.json as
/// published; "" or a folder without them: none) config.json's generation_token_fields and
/// generation_config.json, so that generation stops where the published model's does. `weights` are
/// the checkpoint's in table order (read_checkpoint_weights of build_param_table(model)). Throws
/// skew::Error naming `source` and the first model key no family represents, or the file.
ExportResult export_hf(const ModelConfig& model, const std::vector<HostTensor>& weights, const std::string& out_dir,
                       const std::string& source, const std::string& tokenizer_dir, const std::string& published_dir);

}  // namespace skew::hf
