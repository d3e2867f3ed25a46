// skew import: a Hugging Face checkpoint (MixtralForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM)
// into a folder of skew's model section and weights, for `skew train CONFIG --init-from DIR`
// (docs/huggingface.md, "Import").
#include <fmt/format.h>

#include "hf/import.h"
#include "tools/commands.h"

namespace skew::tools {

void register_import_command(CLI::App& app) {
    struct Args {
        std::string hf_dir;
        std::string out;
    };
    auto a = std::make_shared<Args>();
    CLI::App* cmd = app.add_subcommand(
        "import", "Read a Hugging Face checkpoint (Mixtral, OLMoE, Qwen3-MoE) into a folder skew trains from");
    cmd->add_option("hf_dir", a->hf_dir, "The checkpoint folder: config.json and model.safetensors (or its shards)")
        ->required();
    cmd->add_option("--out", a->out,
                    "The folder to write (new or empty): config.yaml, model.safetensors, tokenizer/, hf/")
        ->required();
    cmd->callback([a] {
        const hf::ImportResult r = hf::import_hf(a->hf_dir, a->out);
        const ModelConfig& m = r.config.model;
        fmt::print("skew import: {} ({}, {} tensors in {} file{}) -> {}\n", a->hf_dir,
                   hf::family_architecture(r.family), r.hf_tensors, r.shards, r.shards == 1 ? "" : "s", a->out);
        fmt::print("  model: d_model {}, {} blocks ({} MoE), {} experts of {}, top-{}, vocabulary {} (padded to {})\n",
                   m.d_model, m.n_blocks, m.moe_blocks.size(), m.n_experts, m.d_expert, m.top_k, m.vocab_size,
                   m.padded_vocab_size);
        if (r.rounded_to_bf16 > 0)
            fmt::print("  {} F32 matrices rounded to bf16 (round to nearest even), skew's matrix dtype\n",
                       r.rounded_to_bf16);
        if (r.widened_to_fp32 > 0)
            fmt::print("  {} BF16 norm and router weights widened to fp32 (exact)\n", r.widened_to_fp32);
        if (r.ignored_tensors > 0)
            fmt::print("  {} RoPE buffers (rotary_emb.inv_freq) dropped, as transformers does\n", r.ignored_tensors);
        if (r.tied_head_dropped)
            fmt::print(
                "  lm_head.weight is the embedding (tie_word_embeddings true): one matrix, model.tie_embeddings\n");
        if (r.config.runtime.backend == BackendChoice::CPU)
            fmt::print(
                "  runtime.backend: cpu in config.yaml: head_dim {} is not a width the CUDA attention kernels "
                "take (16, 32, 64, 128)\n",
                m.head_dim());
        fmt::print("  tokenizer: {}\n",
                   r.tokenizer_files.empty()
                       ? std::string("none in the checkpoint folder")
                       : fmt::format("{} -> {}/tokenizer/", fmt::join(r.tokenizer_files, ", "), a->out));
        if (!r.published_files.empty())
            fmt::print("  kept as published, for skew export --format hf: {}/hf/{}\n", a->out,
                       fmt::join(r.published_files, ", hf/"));
        fmt::print("  train from it: skew train {}/config.yaml --init-from {} --set data.dir=...\n", a->out, a->out);
    });
}

}  // namespace skew::tools
