// Helpers for the Hugging Face import and export tests: the committed tiny checkpoints of
// tests/reference/hf/make_tiny_hf.py, a scratch folder per test, safetensors files read into and
// written from named byte buffers (to make a checkpoint with a tensor missing, added or reshaped).
#pragma once
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "tests/cli_util.h"
#include "tests/temp_dir.h"

namespace skew::test {

/// tests/reference/hf/<family>: the tiny checkpoint of that family (mixtral, olmoe, qwen3).
inline std::string hf_fixture(const std::string& family) {
    return std::string(SKEW_SOURCE_DIR) + "/tests/reference/hf/" + family;
}

/// A new empty folder under the test process's temporary folder.
inline std::string hf_scratch(const std::string& name) {
    const std::filesystem::path d = test_temp_root() / ("hf-" + name);
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
}

/// A tensor of a safetensors file: its dtype, shape and raw bytes.
struct RawTensor {
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;
    std::string bytes;
    bool operator==(const RawTensor&) const = default;
};

/// Every tensor of the safetensors file at `path` by name.
inline std::map<std::string, RawTensor> read_raw_tensors(const std::string& path) {
    const SafetensorsHeader h = read_safetensors_header(path);
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string all = ss.str();
    std::map<std::string, RawTensor> out;
    for (const auto& e : h.tensors)
        out[e.name] = RawTensor{e.dtype, e.shape, all.substr(size_t(h.data_start + e.begin), size_t(e.end - e.begin))};
    return out;
}

/// Write `tensors` to `path` as a safetensors file (metadata format pt).
inline void write_raw_tensors(const std::string& path, std::map<std::string, RawTensor>& tensors) {
    std::vector<NamedTensor> named;
    for (auto& [name, t] : tensors) named.push_back(NamedTensor{name, t.dtype, t.shape, t.bytes.data()});
    write_safetensors(path, named, {{"format", "pt"}});
}

inline std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// A copy of the family's fixture to change, in a new scratch folder named `name`.
inline std::string copy_hf_fixture(const std::string& family, const std::string& name) {
    const std::string dir = hf_scratch(name) + "/" + family;
    std::filesystem::copy(hf_fixture(family), dir, std::filesystem::copy_options::recursive);
    return dir;
}

/// Change config.json of the checkpoint in `dir` with `change(json&)`.
template <typename F>
void edit_config(const std::string& dir, F&& change) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(dir + "/config.json"));
    change(j);
    std::ofstream(dir + "/config.json") << j.dump(2);
}

/// Rewrite the safetensors file at `path` with tensor `name`'s dtype written as `dtype_name` (e.g.
/// "F16", a dtype skew holds no type for), its bytes and every offset unchanged.
inline void set_dtype_name(const std::string& path, const std::string& name, const std::string& dtype_name) {
    const std::string all = read_text_file(path);
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(all[size_t(i)])) << (8 * i);
    nlohmann::json header = nlohmann::json::parse(all.substr(8, size_t(n)));
    header[name]["dtype"] = dtype_name;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << out << text << all.substr(8 + size_t(n));
}

}  // namespace skew::test
