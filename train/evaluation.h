// The trainer's evaluations (docs/design.md, "Training protocol"): the validation loss over the
// fixed batches, across data-parallel ranks, and the unigram baseline's perplexity.
#pragma once
#include <cstdint>
#include <vector>

#include "data/batch_stream.h"
#include "model/model.h"
#include "train/data_parallel.h"

namespace skew {

/// The unigram baseline: perplexity on the validation split of the training split's token
/// frequencies with add-one smoothing over vocab_size tokens. Counts at most the first 100M
/// training tokens and scores at most the first 10M validation tokens (a baseline, not a metric
/// of the model), reading in 1M-token chunks. Every token it reads is checked against vocab_size:
/// throws skew::Error naming the split, the shard file and the token's offset in it
/// (token_split_check_ids) on an id the model cannot hold.
double unigram_val_perplexity(const data::TokenSplit& train, const data::TokenSplit& val, int64_t vocab_size);

/// Validation loss over the fixed validation batches: mean over batches of each batch's mean LM
/// loss (docs/design.md, "Training protocol"), and the mean balance loss (no router noise).
struct EvalResult {
    double val_loss = 0;
    double val_balance_loss = 0;
};

/// Data parallel: rank r evaluates its microbatches of every validation batch (the slice it trains
/// on, dp_global_microbatch) and the ranks' shares are summed.
EvalResult evaluate(Model& model, DataParallel& dp, const data::BatchStream& val, int64_t eval_batches,
                    int64_t batch_size, int64_t mb, int64_t seq_len, int64_t vocab_size, std::vector<int32_t>& x,
                    std::vector<int32_t>& y);

}  // namespace skew
