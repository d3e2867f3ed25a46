// The tiny model of tests/reference/model/make_golden.py and the SKEWGOLD record files its reference
// scripts write (make_golden.py, tests/reference/eval/make_logprobs.py): shared by the model golden
// test and the inference log-probability test.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/error.h"

namespace skew::test {

/// Must match CFG in make_golden_llama.py (checked through the fixture's "config" record).
inline const char* LLAMA_GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: [0, 1]
  n_heads: 4
  n_kv_heads: 2
  max_seq_len: 16
  n_experts: 4
  d_expert: 32
  top_k: 2
  router_noise_std: 0
  positions: rope
  rope_theta: 100
  norm: rmsnorm
  tie_embeddings: false
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// The OLMoE-shaped variant of make_golden_llama.py (VARIANTS["olmoe"]): MHA, QK-norm over the full
/// q and k widths, top-8 of 16 experts without renormalization, RoPE theta 1e4.
inline const char* OLMOE_GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: [0, 1]
  n_heads: 4
  n_kv_heads: 4
  max_seq_len: 16
  n_experts: 16
  d_expert: 16
  top_k: 8
  normalize_top_k: false
  router_noise_std: 0
  positions: rope
  rope_theta: 10000
  norm: rmsnorm
  qk_norm: full
  tie_embeddings: false
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// The Qwen3-shaped variant (VARIANTS["qwen3"]): GQA 4/2, head_dim 16 > d_model / n_heads = 8,
/// QK-norm per head, top-8 of 16 renormalized, RMSNorm eps 1e-6, RoPE theta 1e6.
inline const char* QWEN3_GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: [0, 1]
  n_heads: 4
  n_kv_heads: 2
  head_dim: 16
  max_seq_len: 16
  n_experts: 16
  d_expert: 16
  top_k: 8
  router_noise_std: 0
  positions: rope
  rope_theta: 1000000
  norm: rmsnorm
  norm_eps: 0.000001
  qk_norm: per_head
  tie_embeddings: false
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// The Qwen2-bias variant (VARIANTS["qwen2"]): the q, k and v projections with biases, GQA 4/2,
/// top-2 of 4, RMSNorm eps 1e-6, RoPE theta 1e6.
inline const char* QWEN2_GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: [0, 1]
  n_heads: 4
  n_kv_heads: 2
  max_seq_len: 16
  n_experts: 4
  d_expert: 32
  top_k: 2
  router_noise_std: 0
  positions: rope
  rope_theta: 1000000
  norm: rmsnorm
  norm_eps: 0.000001
  attention_bias: true
  tie_embeddings: false
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// Must match CFG in make_golden.py (the fixture's "config" record is checked against it).
inline const char* GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 3
  moe_blocks: [1, 2]
  n_heads: 4
  n_kv_heads: 2
  d_ff: 64
  max_seq_len: 16
  n_experts: 4
  d_expert: 32
  top_k: 2
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// Must match CFG_QWEN2MOE in make_golden_llama.py (variant qwen2moe): the Llama-family block with
/// Qwen2-MoE's FFN side, top-4 of 8 routed experts without renormalization and two shared experts
/// behind the sigmoid gate.
inline const char* QWEN2MOE_GOLDEN_YAML = R"(
model:
  vocab_size: 96
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: all
  n_heads: 4
  n_kv_heads: 2
  max_seq_len: 16
  n_experts: 8
  d_expert: 16
  top_k: 4
  normalize_top_k: false
  n_shared_experts: 2
  d_shared_expert: 24
  shared_expert_gate: sigmoid
  router_noise_std: 0
  positions: rope
  rope_theta: 100
  norm: rmsnorm
  tie_embeddings: false
train:
  batch_size: 2
  seq_len: 16
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

/// One named fp32 array of a SKEWGOLD file, row-major.
struct GoldenRecord {
    std::vector<int64_t> shape;
    std::vector<float> data;
};

/// Every record of the SKEWGOLD file at `path` ("SKEWGOLD", u32 count, then per record: u32 name
/// length, name, u32 ndim, i64 dims, fp32 data). Throws skew::Error naming the file, with `make` (the
/// script that writes it) when it cannot be opened.
inline std::map<std::string, GoldenRecord> read_golden_records(const std::string& path, const char* make) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail("{}: cannot open (run /usr/bin/python3 {})", path, make);
    char magic[8];
    uint32_t count = 0;
    std::map<std::string, GoldenRecord> out;
    bool ok =
        std::fread(magic, 1, 8, f) == 8 && std::memcmp(magic, "SKEWGOLD", 8) == 0 && std::fread(&count, 4, 1, f) == 1;
    for (uint32_t r = 0; ok && r < count; ++r) {
        uint32_t len = 0, ndim = 0;
        ok = std::fread(&len, 4, 1, f) == 1;
        std::string name(len, '\0');
        ok = ok && std::fread(name.data(), 1, len, f) == len && std::fread(&ndim, 4, 1, f) == 1;
        GoldenRecord rec;
        rec.shape.resize(ndim);
        ok = ok && std::fread(rec.shape.data(), 8, ndim, f) == ndim;
        int64_t n = 1;
        for (int64_t d : rec.shape) n *= d;
        rec.data.resize(size_t(n));
        ok = ok && std::fread(rec.data.data(), 4, size_t(n), f) == size_t(n);
        out[name] = std::move(rec);
    }
    std::fclose(f);
    if (!ok) fail("{}: truncated or not a SKEWGOLD file", path);
    return out;
}

}  // namespace skew::test
