// The trainer's evaluations (train/evaluation.h).
#include "train/evaluation.h"

#include <algorithm>
#include <cmath>

namespace skew {

using data::BatchStream;
using data::TokenSplit;
using data::batch_stream_check_ids;
using data::batch_stream_get;
using data::token_split_check_ids;
using data::token_split_read;

/// The unigram baseline: perplexity on the validation split of the training split's token
/// frequencies with add-one smoothing over vocab_size tokens. Counts at most the first 100M
/// training tokens and scores at most the first 10M validation tokens (a baseline, not a metric
/// of the model), reading in 1M-token chunks. Every token it reads is checked against vocab_size:
/// throws skew::Error naming the split, the shard file and the token's offset in it
/// (token_split_check_ids) on an id the model cannot hold.
double unigram_val_perplexity(const TokenSplit& train, const TokenSplit& val, int64_t vocab_size) {
    const int64_t chunk = int64_t(1) << 20;
    std::vector<int32_t> buf(static_cast<size_t>(chunk));
    std::vector<double> counts(size_t(vocab_size), 1.0);
    double total = double(vocab_size);
    const int64_t n_train = std::min<int64_t>(train.starts.back(), 100'000'000);
    for (int64_t at = 0; at < n_train; at += chunk) {
        const int64_t n = std::min(chunk, n_train - at);
        token_split_read(train, at, n, buf.data());
        token_split_check_ids(train, at, buf.data(), n, vocab_size);
        for (int64_t i = 0; i < n; ++i) counts[size_t(buf[size_t(i)])] += 1.0, total += 1.0;
    }
    const int64_t n_val = std::min<int64_t>(val.starts.back(), 10'000'000);
    double nll = 0;
    int64_t scored = 0;
    for (int64_t at = 0; at < n_val; at += chunk) {
        const int64_t n = std::min(chunk, n_val - at);
        token_split_read(val, at, n, buf.data());
        token_split_check_ids(val, at, buf.data(), n, vocab_size);
        for (int64_t i = 0; i < n; ++i) {
            nll -= std::log(counts[size_t(buf[size_t(i)])] / total);
            ++scored;
        }
    }
    return scored > 0 ? std::exp(nll / double(scored)) : std::nan("");
}

/// Data parallel: rank r evaluates its microbatches of every validation batch (the slice it trains
/// on, dp_global_microbatch) and the ranks' shares are summed.
EvalResult evaluate(Model& model, DataParallel& dp, const BatchStream& val, int64_t eval_batches, int64_t batch_size,
                    int64_t mb, int64_t seq_len, int64_t vocab_size, std::vector<int32_t>& x, std::vector<int32_t>& y) {
    EvalResult r;
    const int64_t accum = batch_size / mb;
    for (int64_t i = 0; i < eval_batches; ++i) {
        batch_stream_get(val, i, x.data(), y.data());
        batch_stream_check_ids(val, i, x.data(), y.data(), vocab_size);
        double lm = 0, bal = 0;
        for (int64_t m = 0; m < dp.accum_steps; ++m) {
            const int64_t g = dp_global_microbatch(dp, m);
            LossParts p = model_eval(model, x.data() + g * mb * seq_len, y.data() + g * mb * seq_len);
            lm += p.lm_loss / double(accum);
            bal += p.balance_loss / double(accum);
        }
        r.val_loss += lm / double(eval_batches);
        r.val_balance_loss += bal / double(eval_batches);
    }
    double sums[2] = {r.val_loss, r.val_balance_loss};
    dp_sum(dp, sums, 2);
    r.val_loss = sums[0];
    r.val_balance_loss = sums[1];
    return r;
}

}  // namespace skew
