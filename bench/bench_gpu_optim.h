// The optimizer section of bench_gpu_ops (bench/bench_gpu_optim.cu): one CUDA step of SkewAdam,
// Adafactor, AdamW and Lion over the parameter set of a model config, against the copy bandwidth.
#pragma once
#include <cstdio>
#include <string>

namespace skew::bench {

/// Time one optimizer step per optimizer over every tensor of `config_path`'s model (synthetic bf16
/// weights and gradients, zero state; needs about 14 GB per 1e9 parameters for AdamW) and print a
/// row each; JSON lines to `out` when given. Throws skew::Error on a bad config or a CUDA failure.
void bench_gpu_optimizers(FILE* out, const std::string& config_path, bool quick);

}  // namespace skew::bench
