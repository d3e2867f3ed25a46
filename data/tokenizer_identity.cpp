// The tokenizer identity checks of data/tokenizer_identity.h: MD5s of the tokenizer files against
// the ones the run's manifest.json recorded when its data was prepared.
#include "data/tokenizer_identity.h"

#include <filesystem>
#include <fstream>

#include "data/prepare.h"
#include "data/tokenizer.h"
#include "engine/error.h"

namespace skew::data {
namespace fs = std::filesystem;

namespace {

// manifest.json's "tokenizer" object, or null when the file or the object is missing or unreadable
// (the data and run checks report unreadable manifests themselves).
nlohmann::json manifest_tokenizer(const fs::path& manifest) {
    std::error_code ec;
    if (!fs::is_regular_file(manifest, ec)) return nullptr;
    std::ifstream in(manifest);
    const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
    if (m.is_discarded() || !m.is_object() || !m.contains("tokenizer") || !m["tokenizer"].is_object()) return nullptr;
    return m["tokenizer"];
}

std::string text_of(const nlohmann::json& t, const char* key) {
    return t.contains(key) && t[key].is_string() ? t[key].get<std::string>() : std::string("?");
}

}  // namespace

nlohmann::json tokenizer_file_md5s(const std::string& tokenizer_dir) {
    const fs::path d(tokenizer_dir);
    const std::string main = tokenizer_main_file(tokenizer_dir);
    std::vector<std::string> files;
    if (main == "tokenizer.json" || main == "tokenizer.model") files = {main};
    else if (main == "encoder.json") files = {"encoder.json", "vocab.bpe"};
    else files = {"vocab.json", "merges.txt"};
    nlohmann::json out = nlohmann::json::object();
    for (const std::string& f : files)
        if (fs::exists(d / f)) out[f] = md5_file((d / f).string());
    return out;
}

void check_run_tokenizer(const std::string& run_dir, const std::string& tokenizer_dir, const std::string& kind,
                         const std::string& what) {
    const fs::path run_manifest = fs::path(run_dir) / "manifest.json";
    const nlohmann::json t = manifest_tokenizer(run_manifest);
    if (t.is_null() || !t.contains("md5") || !t["md5"].is_object()) return;
    const std::string run_kind = text_of(t, "kind");
    if (t.contains("kind") && !kind.empty() && kind != run_kind)
        fail(
            "{}: not the tokenizer this run was trained with: it is a {} tokenizer ({}), the one {} records is {} "
            "(tokenizer folder {}); token ids of another tokenizer are other text: give that folder as --tokenizer",
            what, kind, tokenizer_main_file(tokenizer_dir), run_manifest.string(), run_kind, text_of(t, "dir"));
    const nlohmann::json here = tokenizer_file_md5s(tokenizer_dir);
    for (const auto& [file, md5] : t["md5"].items())
        if (here.contains(file) && md5.is_string() && here[file] != md5)
            fail(
                "{}: not the tokenizer this run was trained with: its {} differs (MD5 {}) from the one {} records "
                "(MD5 {}, tokenizer folder {}); token ids of another tokenizer are other text, so the results would "
                "be wrong: give that folder as --tokenizer",
                what, file, here[file].get<std::string>(), run_manifest.string(), md5.get<std::string>(),
                text_of(t, "dir"));
}

void check_run_data_tokenizer(const std::string& run_dir, const std::string& data_dir, const std::string& what) {
    const fs::path run_manifest = fs::path(run_dir) / "manifest.json",
                   data_manifest = fs::path(data_dir) / "manifest.json";
    const nlohmann::json run_t = manifest_tokenizer(run_manifest), data_t = manifest_tokenizer(data_manifest);
    if (run_t.is_null() || data_t.is_null()) return;
    std::string differs;
    if (run_t.contains("kind") && data_t.contains("kind") && run_t["kind"] != data_t["kind"])
        differs = "a " + text_of(data_t, "kind") + " tokenizer, the run's " + text_of(run_t, "kind");
    else if (run_t.contains("vocab_size") && data_t.contains("vocab_size") &&
             run_t["vocab_size"] != data_t["vocab_size"])
        differs = "a vocabulary of " + data_t["vocab_size"].dump() + " tokens, the run's " + run_t["vocab_size"].dump();
    else if (run_t.contains("md5") && data_t.contains("md5") && run_t["md5"].is_object() && data_t["md5"].is_object())
        for (const auto& [file, md5] : run_t["md5"].items())
            if (data_t["md5"].contains(file) && data_t["md5"][file] != md5 && differs.empty())
                differs = "its " + file + " differs by MD5 from the run's";
    if (!differs.empty())
        fail(
            "{}: its shards were tokenized by another tokenizer than the run's ({} tokenizer {}: {}, {} tokenizer {}); "
            "a model scores only its own tokenizer's ids: prepare the text with `skew prepare --tokenizer {}`",
            what, data_manifest.string(), text_of(data_t, "dir"), differs, run_manifest.string(), text_of(run_t, "dir"),
            text_of(run_t, "dir"));
}

void check_data_tokenizer(const std::string& data_dir, const std::string& tokenizer_dir, const std::string& what) {
    const fs::path data_manifest = fs::path(data_dir) / "manifest.json";
    const nlohmann::json t = manifest_tokenizer(data_manifest);
    if (t.is_null() || !t.contains("md5") || !t["md5"].is_object() || t["md5"].empty()) return;
    const nlohmann::json here = tokenizer_file_md5s(tokenizer_dir);
    std::string differs;
    for (const auto& [file, md5] : t["md5"].items())
        if (here.contains(file) && md5 != here[file] && differs.empty()) differs = "its " + file + " differs by MD5";
    if (differs.empty()) {
        bool shared = false;
        for (const auto& [file, md5] : t["md5"].items()) shared |= here.contains(file);
        if (!shared) differs = "it records " + t["md5"].begin().key() + ", which " + tokenizer_dir + " does not hold";
    }
    if (!differs.empty())
        fail(
            "{}: its shards were tokenized by another tokenizer than {} ({} records tokenizer {}: {}); a model "
            "scores only its own tokenizer's ids: prepare the text with `skew prepare --tokenizer {}`",
            what, tokenizer_dir, data_manifest.string(), text_of(t, "dir"), differs, tokenizer_dir);
}

}  // namespace skew::data
