// skew import: config.json -> the model section, the safetensors (mmap'ed) -> skew's parameter
// table, one copy per tensor (docs/huggingface.md, "Import").
#include "hf/import.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_scan.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/param_table.h"
#include "hf/config_map.h"
#include "hf/folder.h"
#include "hf/mapped_file.h"
#include "hf/tensor_map.h"
#include "kernels/common/bf16.h"

namespace fs = std::filesystem;

namespace skew::hf {

namespace {

// One source tensor: its file and header entry.
struct Source {
    size_t file = 0;
    const SafetensorsEntry* entry = nullptr;
};

// The safetensors files of a checkpoint folder: model.safetensors, else the shards of
// model.safetensors.index.json, with the index's weight_map checked against the files' headers.
struct Checkpoint {
    std::vector<SafetensorsHeader> headers;
    std::map<std::string, Source> tensors;
};

Checkpoint read_checkpoint_headers(const fs::path& dir) {
    Checkpoint c;
    const fs::path single = dir / "model.safetensors", index_path = dir / "model.safetensors.index.json";
    if (fs::exists(single)) {  // the order transformers' from_pretrained looks in
        c.headers.push_back(read_safetensors_header(single.string()));
    } else if (fs::exists(index_path)) {
        std::ifstream in(index_path, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        const nlohmann::json index = json_parse_strict(ss.str(), index_path.string());
        if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
            fail("{}: no weight_map object (tensor name -> shard file)", index_path.string());
        std::map<std::string, size_t> file_of;
        std::map<std::string, std::string> listed;  // tensor -> file, as the index says
        for (const auto& [name, file] : index["weight_map"].items()) {
            if (!file.is_string()) fail("{}: weight_map[\"{}\"] is not a file name", index_path.string(), name);
            const std::string f = file.get<std::string>();
            if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
                fail("{}: weight_map[\"{}\"] is {}, not a file of the folder", index_path.string(), name, file.dump());
            if (!file_of.count(f)) {
                if (!fs::exists(dir / f))
                    fail("{}: weight_map[\"{}\"] names {}, which is not in {}", index_path.string(), name, f,
                         dir.string());
                file_of[f] = c.headers.size();
                c.headers.push_back(read_safetensors_header((dir / f).string()));
            }
            listed[name] = f;
        }
        for (const auto& [name, f] : listed)
            if (!c.headers[file_of[f]].find(name))
                fail("{}: weight_map puts tensor '{}' in {}, which does not hold it", index_path.string(), name, f);
        for (const auto& [f, i] : file_of)
            for (const auto& e : c.headers[i].tensors)
                if (!listed.count(e.name) || listed[e.name] != f)
                    fail("{}: holds tensor '{}', which model.safetensors.index.json's weight_map {}",
                         (dir / f).string(), e.name,
                         listed.count(e.name) ? "puts in " + listed[e.name] : std::string("does not list"));
    } else {
        fail("{}: neither model.safetensors nor model.safetensors.index.json is there", dir.string());
    }
    for (size_t i = 0; i < c.headers.size(); ++i)
        for (const auto& e : c.headers[i].tensors) {
            if (c.tensors.count(e.name))
                fail("{}: tensor '{}' is also in {}", c.headers[i].path, e.name,
                     c.headers[c.tensors[e.name].file].path);
            c.tensors[e.name] = Source{i, &e};
        }
    return c;
}

// n values from src (dtype s, any alignment) into dst (dtype d): the same dtype copied, BF16 -> F32
// widened exactly, F32 -> BF16 rounded to nearest even.
void convert(std::byte* dst, DType d, const std::byte* src, DType s, int64_t n) {
    if (s == d) {
        std::memcpy(dst, src, size_t(n * dtype_bytes(d)));
    } else if (s == DType::BF16 && d == DType::F32) {
        for (int64_t i = 0; i < n; ++i) {
            bf16 h;
            std::memcpy(&h.bits, src + 2 * i, 2);
            const float x = bf16_to_f32(h);
            std::memcpy(dst + 4 * i, &x, 4);
        }
    } else if (s == DType::F32 && d == DType::BF16) {
        for (int64_t i = 0; i < n; ++i) {
            float x;
            std::memcpy(&x, src + 4 * i, 4);
            const bf16 h = f32_to_bf16(x);
            std::memcpy(dst + 2 * i, &h.bits, 2);
        }
    } else {
        fail("import: no conversion from {} to {}", dtype_name(s), dtype_name(d));
    }
}

}  // namespace

ImportResult import_hf(const std::string& hf_dir, const std::string& out_dir) {
    const fs::path dir(hf_dir);
    if (!fs::is_directory(dir)) fail("{}: not a folder (give a Hugging Face checkpoint folder)", hf_dir);
    refuse_existing_output(out_dir, "--out");
    const std::string config_path = (dir / "config.json").string();
    const nlohmann::json hf_config = read_hf_config(config_path);
    ImportResult r;
    r.family = family_of_hf_config(hf_config, config_path);
    const ModelConfig m = model_config_from_hf(hf_config, r.family, config_path);
    r.config = config_from_model(m, config_path + " (as skew's model section)");
    const ParamTable table = build_param_table(r.config.model);
    const std::vector<HfTensor> want = hf_tensors(r.family, r.config.model, table);
    const char* arch = family_architecture(r.family);

    // every tensor named, shaped and typed as this config's checkpoint has it
    const Checkpoint ck = read_checkpoint_headers(dir);
    std::map<std::string, const HfTensor*> by_name;
    for (const HfTensor& t : want) by_name[t.name] = &t;
    for (const auto& [name, src] : ck.tensors)
        if (!by_name.count(name))
            fail("{}: tensor '{}' is not a tensor of {} as config.json describes it{}", ck.headers[src.file].path, name,
                 arch,
                 name.find("gate_up_proj") != std::string::npos
                     ? " (fused experts, transformers' save_original_format=False: save with the per-expert names)"
                     : "");
    for (const HfTensor& t : want) {
        const auto it = ck.tensors.find(t.name);
        if (it == ck.tensors.end())
            fail("{}: missing tensor '{}' {} of {} as config.json describes it (skew's {})", hf_dir, t.name,
                 shape_text(t.shape), arch, table.params[t.param].name);
        const SafetensorsEntry& e = *it->second.entry;
        const std::string& file = ck.headers[it->second.file].path;
        if (e.shape != t.shape)
            fail("{}: tensor '{}' has shape {} but {} as config.json describes it needs {}", file, t.name,
                 shape_text(e.shape), arch, shape_text(t.shape));
        if (e.dtype != DType::BF16 && e.dtype != DType::F32)
            fail("{}: tensor '{}' is {}; skew imports BF16 and F32 weights", file, t.name, safetensors_dtype(e.dtype));
    }

    // the output, written whole into a hidden sibling and swapped in
    const std::string temp = begin_checkpoint_folder(out_dir, "import-" + std::to_string(::getpid()));
    try {
        std::vector<std::unique_ptr<MappedFile>> maps;
        for (const SafetensorsHeader& h : ck.headers)
            maps.push_back(std::make_unique<MappedFile>(h.path, h.file_bytes));
        // skew's file as write_safetensors lays it out: the table's tensors in order, contiguous
        const std::string out_path = (fs::path(temp) / "model.safetensors").string();
        std::vector<NamedTensor> layout;
        std::vector<int64_t> offsets;
        int64_t data_bytes = 0;
        for (const ParamInfo& p : table.params) {
            layout.push_back(NamedTensor{p.name, p.dtype, p.shape, nullptr});
            offsets.push_back(data_bytes);
            data_bytes += p.bytes();
        }
        const std::string header = safetensors_header_bytes(
            out_path, layout, {{"format", "pt"}, {"source", "skew import"}, {"architecture", arch}});
        OutputFile out(out_path, int64_t(header.size()) + data_bytes);
        std::memcpy(out.data, header.data(), header.size());
        std::byte* base = out.data + header.size();
        std::memset(base, 0, size_t(data_bytes));  // the padded vocabulary rows stay zero
        for (const HfTensor& t : want) {
            const Source& src = ck.tensors.at(t.name);
            const SafetensorsHeader& h = ck.headers[src.file];
            const ParamInfo& p = table.params[t.param];
            std::byte* dst = base + offsets[t.param] + t.offset * dtype_bytes(p.dtype);
            convert(dst, p.dtype, maps[src.file]->data + h.data_start + src.entry->begin, src.entry->dtype, t.numel());
            r.rounded_to_bf16 += src.entry->dtype == DType::F32 && p.dtype == DType::BF16;
            r.widened_to_fp32 += src.entry->dtype == DType::BF16 && p.dtype == DType::F32;
            if (auto bad = first_non_finite({NamedTensor{t.name, p.dtype, t.shape, dst}})) {
                fail("{}: tensor '{}' holds a non-finite value at {}{}", h.path, t.name, shape_text(bad->coords),
                     src.entry->dtype == DType::F32 && p.dtype == DType::BF16 ? " (after rounding to bf16)" : "");
            }
        }
        out.finish();
        r.hf_tensors = int64_t(want.size());
        r.shards = int64_t(ck.headers.size());
        write_file_atomic((fs::path(temp) / "config.yaml").string(),
                          fmt::format("# skew import of {} ({}): its config.json as skew's model section; train from "
                                      "it with `skew train CONFIG --init-from {}` (docs/huggingface.md)\n",
                                      hf_dir, arch, out_dir) +
                              config_yaml(r.config.model));
        r.tokenizer_files = copy_tokenizer_files(hf_dir, (fs::path(temp) / "tokenizer").string());
    } catch (...) {
        std::error_code ec;
        fs::remove_all(temp, ec);
        throw;
    }
    commit_checkpoint_folder(temp, out_dir);
    return r;
}

}  // namespace skew::hf
