// Validation loss and perplexity over a prepared dataset's split (docs/evaluation.md), computed
// exactly as the trainer's evaluation: fixed batches of train.batch_size x train.seq_len from the
// split's start, each batch's mean LM loss averaged over batches, perplexity = exp(mean).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/model.h"

namespace skew::eval {

struct PerplexityResult {
    std::string split;
    int64_t batches = 0;
    int64_t tokens = 0;  // batches * batch_size * seq_len scored tokens
    double loss = 0.0;   // mean LM loss, nats per token
    double perplexity = 0.0;
};

/// Evaluate `m` (microbatch m.microbatch, seq_len m.seq_len) on batches of batch_size sequences
/// from `data_dir`'s `split` ("val" or "train"): the first `batches` of them, or every distinct
/// batch when batches <= 0. batch_size must be a multiple of m.microbatch. Token ids are checked
/// against the model's vocabulary. Throws skew::Error naming the folder, split or shard.
PerplexityResult evaluate_perplexity(Model& m, const std::string& data_dir, const std::string& split,
                                     int64_t batch_size, int64_t batches,
                                     const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace skew::eval
