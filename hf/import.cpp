// skew import: config.json -> the model section, the safetensors (mmap'ed) -> skew's parameter
// table, one copy per tensor (docs/huggingface.md, "Import").
#include "hf/import.h"

#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_folder.h"
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
    const HfFolder folder{dir.string()};
    const fs::path single = folder.weights(), index_path = folder.weights_index();
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
        fail("import: no conversion from {} to {}", choice_name(s), choice_name(d));
    }
}

// The value of element i of n (dtype s: BF16 or F32) as a float, exactly.
float value_at(const std::byte* src, DType s, int64_t i) {
    if (s == DType::F32) {
        float x;
        std::memcpy(&x, src + 4 * i, 4);
        return x;
    }
    bf16 h;
    std::memcpy(&h.bits, src + 2 * i, 2);
    return bf16_to_f32(h);
}

// The first of n elements where a (dtype da) and b (db), BF16 or F32, hold different values (bit for
// bit after widening to fp32), or -1.
int64_t first_difference(const std::byte* a, DType da, const std::byte* b, DType db, int64_t n) {
    if (da == db && std::memcmp(a, b, size_t(n * dtype_bytes(da))) == 0) return -1;
    for (int64_t i = 0; i < n; ++i)
        if (std::bit_cast<uint32_t>(value_at(a, da, i)) != std::bit_cast<uint32_t>(value_at(b, db, i))) return i;
    return -1;
}

// transformers' non-persistent RoPE buffers: older checkpoints saved one per layer
// (model.layers.N.self_attn.rotary_emb.inv_freq); from_pretrained drops every key holding
// "rotary_emb.inv_freq", and so does skew (RoPE's frequencies come from rope_theta).
bool is_ignored_buffer(const std::string& name) { return name.find("rotary_emb.inv_freq") != std::string::npos; }

// transformers v5's fused expert banks of one layer, written when a model is saved with
// save_original_format=False: mlp.experts.gate_up_proj (E, 2 I, d) and mlp.experts.down_proj (E, d, I).
bool is_fused_experts(const std::string& name) {
    for (const char* tail : {".experts.gate_up_proj", ".experts.down_proj"}) {
        const std::string t(tail);
        if (name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0) return true;
    }
    return false;
}

constexpr const char* EMBED_NAME = "model.embed_tokens.weight";

}  // namespace

ImportResult import_hf(const std::string& hf_dir, const std::string& out_dir) {
    const fs::path dir(hf_dir);
    if (!fs::is_directory(dir)) fail("{}: not a folder (give a Hugging Face checkpoint folder)", hf_dir);
    refuse_existing_output(out_dir, "--out");
    const std::string config_path = HfFolder{hf_dir}.config();
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
    const auto file_of = [&](const Source& src) -> const std::string& { return ck.headers[src.file].path; };
    auto check_dtype = [&](const std::string& name, const Source& src) {
        if (!src.entry->dtype_known || (src.entry->dtype != DType::BF16 && src.entry->dtype != DType::F32))
            fail("{}: tensor '{}' is {}; skew imports BF16 and F32 weights", file_of(src), name, src.entry->dtype_name);
    };
    for (const auto& [name, src] : ck.tensors)  // before any other name: its hint says what the file is
        if (is_fused_experts(name))
            fail(
                "{}: tensor '{}' holds every expert of a layer (transformers v5's fused experts, saved with "
                "save_original_format=False): save the checkpoint with the per-expert names",
                file_of(src), name);
    std::map<std::string, const HfTensor*> by_name;
    for (const HfTensor& t : want) by_name[t.name] = &t;
    const Source* tied_head = nullptr;  // lm_head.weight of a checkpoint with tie_word_embeddings true
    for (const auto& [name, src] : ck.tensors) {
        if (by_name.count(name)) continue;
        if (is_ignored_buffer(name)) {
            ++r.ignored_tensors;
            continue;
        }
        if (name == "lm_head.weight" && r.config.model.tie_embeddings) {
            tied_head = &src;
            continue;
        }
        fail("{}: tensor '{}' is not a tensor of {} as config.json describes it", file_of(src), name, arch);
    }
    for (const HfTensor& t : want) {
        const auto it = ck.tensors.find(t.name);
        if (it == ck.tensors.end())
            fail("{}: missing tensor '{}' {} of {} as config.json describes it (skew's {})", hf_dir, t.name,
                 shape_text(t.shape), arch, table.params[t.param].name);
        const SafetensorsEntry& e = *it->second.entry;
        if (e.shape != t.shape)
            fail("{}: tensor '{}' has shape {} but {} as config.json describes it needs {}", file_of(it->second),
                 t.name, shape_text(e.shape), arch, shape_text(t.shape));
        check_dtype(t.name, it->second);
    }
    const Source* embed = &ck.tensors.at(EMBED_NAME);
    if (tied_head) {
        if (tied_head->entry->shape != embed->entry->shape)
            fail(
                "{}: tensor 'lm_head.weight' has shape {} but config.json's tie_word_embeddings is true: the head is "
                "{} {} itself",
                file_of(*tied_head), shape_text(tied_head->entry->shape), EMBED_NAME, shape_text(embed->entry->shape));
        check_dtype("lm_head.weight", *tied_head);
    }

    // the output, written whole into a hidden sibling and swapped in
    const std::string temp = begin_checkpoint_folder(out_dir, "import-" + std::to_string(::getpid()));
    try {
        std::vector<std::unique_ptr<MappedFile>> maps;
        for (const SafetensorsHeader& h : ck.headers)
            maps.push_back(std::make_unique<MappedFile>(h.path, h.file_bytes));
        auto data_of = [&](const Source& src) {
            return maps[src.file]->data + ck.headers[src.file].data_start + src.entry->begin;
        };
        if (tied_head) {  // transformers ties the head to the embedding; skew holds one matrix
            const int64_t d = embed->entry->shape[1];
            if (const int64_t i = first_difference(data_of(*embed), embed->entry->dtype, data_of(*tied_head),
                                                   tied_head->entry->dtype, embed->entry->shape[0] * d);
                i >= 0)
                fail(
                    "{}: tensor 'lm_head.weight' differs from {} at [{}, {}], but config.json's tie_word_embeddings "
                    "is true (one matrix for both): the checkpoint's head is not its embedding",
                    file_of(*tied_head), EMBED_NAME, i / d, i % d);
            r.tied_head_dropped = true;
        }
        // skew's file as write_safetensors lays it out: the table's tensors in order, contiguous
        const ImportFolder written{temp};
        const std::string out_path = written.weights();
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
            convert(dst, p.dtype, data_of(src), src.entry->dtype, t.numel());
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
        write_file_atomic(written.config(),
                          fmt::format("# skew import of {} ({}): its config.json as skew's model section; train from "
                                      "it with `skew train CONFIG --init-from {}` (docs/huggingface.md)\n",
                                      hf_dir, arch, out_dir) +
                              config_yaml(r.config.model));
        r.tokenizer_files = copy_tokenizer_files(hf_dir, written.tokenizer());
        r.published_files = copy_files(hf_dir, written.published().dir, published_file_names());
    } catch (...) {
        std::error_code ec;
        fs::remove_all(temp, ec);
        throw;
    }
    commit_checkpoint_folder(temp, out_dir);
    return r;
}

}  // namespace skew::hf
