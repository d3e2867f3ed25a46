// What `skew import` refuses, each in one line naming the thing, with exit status 1 and no output
// folder: an architecture of no supported family, a field skew cannot represent, a tensor missing,
// extra, of another shape or dtype, an index that names a file or tensor that is not there, an
// output folder that holds files; and `skew train --init-from` with another model section.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "hf_test_util.h"

using namespace skew;
using namespace skew::test;
namespace fs = std::filesystem;

namespace {

// A copy of the family's fixture to change.
std::string copy_fixture(const std::string& family, const std::string& name) {
    const std::string dir = hf_scratch("refuse-" + name) + "/" + family;
    fs::copy(hf_fixture(family), dir, fs::copy_options::recursive);
    return dir;
}

// Change config.json of the checkpoint in `dir`.
template <typename F>
void edit_config(const std::string& dir, F&& change) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(dir + "/config.json"));
    change(j);
    std::ofstream(dir + "/config.json") << j.dump(2);
}

// `skew import dir` fails with status 1 and one line naming `needle`; the output folder is not made.
void refused(const std::string& dir, const std::string& needle) {
    const std::string out = dir + "-out";
    const Run r = run_skew("import " + dir + " --out " + out);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.rfind("skew: error: ", 0) == 0);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.find(needle) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
}

}  // namespace

TEST_CASE("import refuses an architecture of no supported family, naming it and the supported ones", "[hf]") {
    const std::string dir = copy_fixture("mixtral", "arch");
    edit_config(dir, [](nlohmann::json& j) {
        j["architectures"] = {"LlamaForCausalLM"};
        j["model_type"] = "llama";
    });
    refused(dir,
            "architectures [LlamaForCausalLM] is not supported; skew imports MixtralForCausalLM, "
            "OlmoeForCausalLM, Qwen3MoeForCausalLM");
}

TEST_CASE("import refuses config.json fields skew cannot represent, naming the field", "[hf]") {
    const std::string a = copy_fixture("mixtral", "rope-scaling");
    edit_config(a, [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
    refused(a, "rope_scaling is {\"factor\":4.0,\"rope_type\":\"yarn\"}: skew's RoPE has no scaling");
    const std::string b = copy_fixture("mixtral", "sliding-window");
    edit_config(b, [](nlohmann::json& j) { j["sliding_window"] = 4096; });
    refused(b, "sliding_window is 4096");
    const std::string c = copy_fixture("qwen3", "use-sliding-window");
    edit_config(c, [](nlohmann::json& j) { j["use_sliding_window"] = true; });
    refused(c, "use_sliding_window is true");
    const std::string d = copy_fixture("olmoe", "clip-qkv");
    edit_config(d, [](nlohmann::json& j) { j["clip_qkv"] = 8.0; });
    refused(d, "clip_qkv is 8.0");
    const std::string e = copy_fixture("qwen3", "no-hidden-size");
    edit_config(e, [](nlohmann::json& j) { j.erase("hidden_size"); });
    refused(e, "hidden_size is missing (Qwen3MoeForCausalLM needs it)");
}

TEST_CASE("import refuses a missing tensor, an extra one and one of another shape or dtype, naming it", "[hf]") {
    const std::string missing = copy_fixture("mixtral", "missing");
    auto t = read_raw_tensors(missing + "/model.safetensors");
    t.erase("model.layers.1.block_sparse_moe.experts.3.w2.weight");
    write_raw_tensors(missing + "/model.safetensors", t);
    refused(missing, "missing tensor 'model.layers.1.block_sparse_moe.experts.3.w2.weight' [32, 16]");

    const std::string extra = copy_fixture("mixtral", "extra");
    t = read_raw_tensors(extra + "/model.safetensors");
    t["model.layers.0.self_attn.o_proj.bias"] = RawTensor{DType::BF16, {32}, std::string(64, '\0')};
    write_raw_tensors(extra + "/model.safetensors", t);
    refused(extra, "tensor 'model.layers.0.self_attn.o_proj.bias' is not a tensor of MixtralForCausalLM");

    const std::string shape = copy_fixture("mixtral", "shape");
    t = read_raw_tensors(shape + "/model.safetensors");
    t["model.layers.0.self_attn.k_proj.weight"].shape = {8, 64};  // the same bytes, another shape
    write_raw_tensors(shape + "/model.safetensors", t);
    refused(shape,
            "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [8, 64] but MixtralForCausalLM as "
            "config.json describes it needs [16, 32]");

    const std::string dtype = copy_fixture("mixtral", "dtype");
    t = read_raw_tensors(dtype + "/model.safetensors");
    RawTensor& n = t["model.norm.weight"];
    n = RawTensor{DType::I32, {32}, std::string(128, '\0')};
    write_raw_tensors(dtype + "/model.safetensors", t);
    refused(dtype, "tensor 'model.norm.weight' is I32; skew imports BF16 and F32 weights");
}

TEST_CASE("import refuses a shard index naming a file or tensor that is not there", "[hf]") {
    const std::string gone = copy_fixture("olmoe", "shard-gone");
    fs::remove(gone + "/model-00002-of-00002.safetensors");
    refused(gone, "names model-00002-of-00002.safetensors, which is not in");

    const std::string moved = copy_fixture("olmoe", "shard-moved");
    nlohmann::json index = nlohmann::json::parse(read_text_file(moved + "/model.safetensors.index.json"));
    index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors";
    std::ofstream(moved + "/model.safetensors.index.json") << index.dump(2);
    refused(moved,
            "weight_map puts tensor 'lm_head.weight' in model-00001-of-00002.safetensors, which does not hold it");

    const std::string none = copy_fixture("olmoe", "no-weights");
    fs::remove(none + "/model.safetensors.index.json");
    refused(none, "neither model.safetensors nor model.safetensors.index.json is there");
}

TEST_CASE("import writes a new folder only: an --out that holds files is refused", "[hf]") {
    const std::string out = hf_scratch("refuse-out") + "/out";
    fs::create_directories(out);
    std::ofstream(out + "/notes.txt") << "mine";
    const Run r = run_skew("import " + hf_fixture("qwen3") + " --out " + out);
    CHECK(r.status == 1);
    CHECK(r.output.find("--out " + out + ": the folder exists and holds files") != std::string::npos);
    CHECK(read_text_file(out + "/notes.txt") == "mine");
}
