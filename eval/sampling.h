// Choosing the next token from logits (docs/evaluation.md, "skew sample"): temperature, top-k,
// top-p (nucleus) and greedy decoding, with draws from Philox keyed by (seed, sample, position)
// so the same seed gives the same text on the same backend.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace skew::eval {

struct SamplingOptions {
    double temperature = 1.0;  // 0: greedy (argmax)
    int64_t top_k = 0;         // keep the k most probable tokens; 0: all
    double top_p = 1.0;        // keep the smallest set whose probability reaches p; 1: all
    uint64_t seed = 0;
};

/// The distribution sampling draws from: probabilities (vocab_size) in float64 after temperature,
/// top-k and top-p (renormalized; tokens removed have 0). Columns >= vocab_size of the padded
/// logits are never chosen. Ties in the top-k / top-p cut keep the lower token id first.
/// temperature 0 puts probability 1 on the argmax (lowest id among ties).
std::vector<double> sampling_distribution(std::span<const float> logits, int64_t vocab_size, const SamplingOptions& o);

/// Draw a token from sampling_distribution with the uniform of Philox (seed, stream 5, sample,
/// position): deterministic for a given (seed, sample, position).
int32_t sample_token(std::span<const float> logits, int64_t vocab_size, const SamplingOptions& o, uint32_t sample,
                     uint64_t position);

/// The uniform in [0, 1) (53 bits) that sample_token uses for (seed, sample, position).
double sampling_uniform(uint64_t seed, uint32_t sample, uint64_t position);

}  // namespace skew::eval
