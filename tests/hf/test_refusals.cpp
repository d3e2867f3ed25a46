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

std::string copy_fixture(const std::string& family, const std::string& name) {
    return copy_hf_fixture(family, "refuse-" + name);
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

    // a dtype skew holds no type for is named as import's own rule says (not the header reader's list)
    const std::string f16 = copy_fixture("mixtral", "f16");
    set_dtype_name(f16 + "/model.safetensors", "model.norm.weight", "F16");
    refused(f16, "tensor 'model.norm.weight' is F16; skew imports BF16 and F32 weights");
}

TEST_CASE("import names transformers v5's fused experts, whichever of its tensors sorts first", "[hf]") {
    // save_original_format=False: one (E, 2 I, d) gate_up_proj and one (E, d, I) down_proj per layer
    const std::string fused = copy_fixture("olmoe", "fused");
    for (const char* shard : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors"}) {
        auto t = read_raw_tensors(fused + shard);
        if (!t.count("model.layers.0.mlp.gate.weight")) continue;
        for (const char* layer : {"0", "1"}) {
            const std::string m = std::string("model.layers.") + layer + ".mlp.experts.";
            for (int e = 0; e < 8; ++e)
                for (const char* p : {"gate_proj", "up_proj", "down_proj"})
                    t.erase(m + std::to_string(e) + "." + p + ".weight");
            t[m + "gate_up_proj"] = RawTensor{DType::F32, {8, 32, 32}, std::string(8 * 32 * 32 * 4, '\0')};
            t[m + "down_proj"] = RawTensor{DType::F32, {8, 32, 16}, std::string(8 * 32 * 16 * 4, '\0')};
        }
        write_raw_tensors(fused + shard, t);
    }
    fs::remove(fused + "/model.safetensors.index.json");  // the shards as one file would be: list them anew
    auto a = read_raw_tensors(fused + "/model-00001-of-00002.safetensors");
    const auto b = read_raw_tensors(fused + "/model-00002-of-00002.safetensors");
    a.insert(b.begin(), b.end());
    fs::remove(fused + "/model-00001-of-00002.safetensors");
    fs::remove(fused + "/model-00002-of-00002.safetensors");
    write_raw_tensors(fused + "/model.safetensors", a);
    refused(fused,
            "tensor 'model.layers.0.mlp.experts.down_proj' holds every expert of a layer (transformers v5's fused "
            "experts, saved with save_original_format=False): save the checkpoint with the per-expert names");
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
