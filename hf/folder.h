// The output folders of `skew import` and `skew export --format hf`: written whole into a hidden
// temporary sibling and swapped in at the end (checkpoint/checkpoint.h's folder helpers), never over a
// folder that holds files; the tokenizer files a checkpoint folder carries, and the published files
// an import keeps for export.
#pragma once
#include <string>
#include <vector>

namespace skew::hf {

/// The tokenizer files a Hugging Face checkpoint folder may hold, in the order copied:
/// tokenizer.json, tokenizer.model, tokenizer_config.json, special_tokens_map.json.
const std::vector<std::string>& tokenizer_file_names();

/// Refuse `out` (given as `flag`, e.g. "--out") when it exists and is not an empty folder: the
/// commands write a new folder and never replace files. Throws skew::Error naming it.
void refuse_existing_output(const std::string& out, const std::string& flag);

/// Copy those of `names` that exist in `from` into folder `to` (created when one does); returns the
/// names copied. Throws skew::Error naming the file on a failed copy.
std::vector<std::string> copy_files(const std::string& from, const std::string& to,
                                    const std::vector<std::string>& names);

/// copy_files of tokenizer_file_names().
std::vector<std::string> copy_tokenizer_files(const std::string& from, const std::string& to);

/// The files of a checkpoint folder `skew import` keeps as published, in IMPORT/hf/, for `skew export
/// --format hf` to write back what skew's model section does not hold: config.json (its
/// generation_token_fields) and generation_config.json.
const std::vector<std::string>& published_file_names();

/// config.json's token ids that generation reads (transformers' GenerationConfig.from_model_config
/// when no generation_config.json is there): bos_token_id, eos_token_id, pad_token_id.
const std::vector<std::string>& generation_token_fields();

}  // namespace skew::hf
