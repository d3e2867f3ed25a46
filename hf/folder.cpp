// Output folder checks and tokenizer copies for import and export (docs/huggingface.md).
#include "hf/folder.h"

#include <filesystem>

#include "checkpoint/run_folder.h"
#include "engine/error.h"

namespace fs = std::filesystem;

namespace skew::hf {

const std::vector<std::string>& tokenizer_file_names() {
    static const std::vector<std::string> names = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                                   "special_tokens_map.json"};
    return names;
}

void refuse_existing_output(const std::string& out, const std::string& flag) {
    if (out.empty()) fail("{}: empty path; name the folder to write", flag);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(out, ec))) return;
    if (!fs::is_directory(out, ec)) fail("{} {}: exists and is not a folder; give a new folder", flag, out);
    if (!fs::is_empty(out, ec)) fail("{} {}: the folder exists and holds files; give a new folder", flag, out);
}

std::vector<std::string> copy_files(const std::string& from, const std::string& to,
                                    const std::vector<std::string>& names) {
    std::vector<std::string> copied;
    for (const std::string& name : names) {
        const fs::path src = fs::path(from) / name;
        std::error_code ec;
        if (!fs::is_regular_file(src, ec)) continue;
        fs::create_directories(to, ec);
        if (ec) fail("{}: cannot create the folder: {}", to, ec.message());
        fs::copy_file(src, fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
        if (ec) fail("{}: cannot copy to {}: {}", src.string(), to, ec.message());
        copied.push_back(name);
    }
    return copied;
}

std::vector<std::string> copy_tokenizer_files(const std::string& from, const std::string& to) {
    return copy_files(from, to, tokenizer_file_names());
}

const std::vector<std::string>& published_file_names() {
    static const std::vector<std::string> names = {HfFolder::CONFIG_FILE, HfFolder::GENERATION_CONFIG_FILE};
    return names;
}

const std::vector<std::string>& generation_token_fields() {
    static const std::vector<std::string> names = {"bos_token_id", "eos_token_id", "pad_token_id"};
    return names;
}

}  // namespace skew::hf
