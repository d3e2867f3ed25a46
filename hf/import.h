// `skew import HF_DIR --out DIR` (docs/huggingface.md, "Import"): a Hugging Face checkpoint of one
// of the three families into a folder skew trains from (`skew train CONFIG --init-from DIR`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "hf/family.h"

namespace skew::hf {

/// What an import wrote.
struct ImportResult {
    Family family = Family::MIXTRAL;
    Config config;                             // DIR/config.yaml as loaded
    int64_t hf_tensors = 0;                    // tensors read
    int64_t shards = 0;                        // safetensors files read
    int64_t rounded_to_bf16 = 0;               // F32 tensors rounded to skew's bf16 matrices (nearest even)
    int64_t widened_to_fp32 = 0;               // BF16 tensors widened (exactly) to skew's fp32 vectors and router
    int64_t ignored_tensors = 0;               // RoPE buffers (rotary_emb.inv_freq) transformers drops too
    bool tied_head_dropped = false;            // lm_head.weight equal to the embedding, tie_word_embeddings true
    std::vector<std::string> tokenizer_files;  // copied into DIR/tokenizer/
    std::vector<std::string> published_files;  // config.json, generation_config.json kept in DIR/hf/ for export
};

/// Import the checkpoint in folder `hf_dir`: config.json (model_config_from_hf), then the weights
/// of model.safetensors, or of the shards model.safetensors.index.json's weight_map names, each file
/// validated (read_safetensors_header) and memory-mapped. Every tensor must be one that hf_tensors
/// lists for that config, with its shape, in BF16 or F32, as transformers' from_pretrained loads
/// them: RoPE buffers (names holding rotary_emb.inv_freq) are dropped, and with tie_word_embeddings
/// true an lm_head.weight is dropped where it holds the embedding's values; each is copied once into the output,
/// converted to the parameter's dtype (BF16 -> fp32 exact; F32 -> bf16 round-to-nearest-even) and
/// checked finite. Writes folder `out_dir` (new or empty; written whole into a hidden temporary
/// sibling and swapped in at the end): config.yaml (the model section, model_section_yaml),
/// model.safetensors (skew's names, table order, the padded vocabulary rows zero), tokenizer/ with
/// the tokenizer files found, and hf/ with the checkpoint's config.json and generation_config.json as
/// published (folder.h: what export writes back of them). Throws skew::Error in one line naming the file and the
/// field or tensor: an unsupported architecture or field, a missing, extra or misshapen tensor, a
/// tensor of another dtype, transformers v5's fused experts (gate_up_proj, down_proj of a whole
/// layer), a tied lm_head.weight that is not the embedding, an index naming a file or tensor that is
/// not there, a non-finite value;
/// `out_dir` is then left as it was.
ImportResult import_hf(const std::string& hf_dir, const std::string& out_dir);

}  // namespace skew::hf
