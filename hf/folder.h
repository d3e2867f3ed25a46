// The output folders of `skew import` and `skew export --format hf`: written whole into a hidden
// temporary sibling and swapped in at the end (checkpoint/checkpoint.h's folder helpers), never over a
// folder that holds files; and the tokenizer files a checkpoint folder carries.
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

/// Copy those of tokenizer_file_names() that exist in `from` into folder `to` (created when one
/// does); returns the names copied. Throws skew::Error naming the file on a failed copy.
std::vector<std::string> copy_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace skew::hf
