// Which tokenizer a run's tokens came from (docs/data.md): `skew prepare` records the MD5 of each
// tokenizer file in manifest.json (tokenizer.md5) and `skew train` copies that manifest into the run
// folder, so `skew eval` and `skew sample` can refuse a tokenizer or a dataset of another tokenizer
// (its ids mean other text: the scores would be silently wrong).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace skew::data {

/// {file name: lowercase hex MD5} of the files tokenizer_load reads from a tokenizer folder, as
/// `skew prepare` records them: tokenizer.json, else tokenizer.model, else encoder.json and vocab.bpe
/// when both exist, else vocab.json and merges.txt (those present).
nlohmann::json tokenizer_file_md5s(const std::string& tokenizer_dir);

/// Throws skew::Error when RUN_DIR/manifest.json records another kind of tokenizer than `kind` (the
/// choice_name of the one loaded from `tokenizer_dir`), or tokenizer files that
/// `tokenizer_dir` holds under the same names with other bytes (MD5), naming `what` (e.g.
/// "--tokenizer DIR"), the file and the run's tokenizer folder. No manifest: nothing checked;
/// GPT-2's two file layouts are not compared.
void check_run_tokenizer(const std::string& run_dir, const std::string& tokenizer_dir, const std::string& kind,
                         const std::string& what);

/// Throws skew::Error when DATA_DIR/manifest.json and RUN_DIR/manifest.json record different
/// tokenizers (kind, vocabulary size, or the MD5 of a file both name), naming `what` (e.g. "--data DIR")
/// and both manifests. Either manifest missing: nothing checked.
void check_run_data_tokenizer(const std::string& run_dir, const std::string& data_dir, const std::string& what);

/// Throws skew::Error when DATA_DIR/manifest.json records another tokenizer than the one in
/// `tokenizer_dir`: none of the files it records (by name) is there, or one of them has other bytes
/// (MD5). Names `what` (e.g. "--data DIR"), the manifest and the folder. No manifest: nothing checked.
void check_data_tokenizer(const std::string& data_dir, const std::string& tokenizer_dir, const std::string& what);

}  // namespace skew::data
