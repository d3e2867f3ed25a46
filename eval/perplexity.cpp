// Perplexity of a checkpoint on a prepared split, the trainer's evaluation reproduced (mean over
// batches of the batch's mean LM loss over its microbatches; train/trainer.cpp evaluate()).
#include "eval/perplexity.h"

#include <cmath>
#include <vector>

#include "data/batch_stream.h"
#include "engine/error.h"

namespace skew::eval {

PerplexityResult evaluate_perplexity(Model& m, const std::string& data_dir, const std::string& split,
                                     int64_t batch_size, int64_t batches,
                                     const std::function<void(int64_t, int64_t)>& progress) {
    if (split != "val" && split != "train") fail("--split {}: expected val or train", split);
    const int64_t mb = m.microbatch, T = m.seq_len;
    if (batch_size < mb || batch_size % mb != 0)
        fail("batch size {} is not a multiple of the microbatch {}", batch_size, mb);
    const data::TokenSplit s = data::token_split_open(data_dir, split);
    const data::BatchStream stream = data::batch_stream_make(s, batch_size, T, 0);
    const int64_t n = batches > 0 ? batches : stream.num_batches;
    data::batch_stream_require(stream, n, "--batches " + std::to_string(n) + " batches of the " + split + " split");
    std::vector<int32_t> x(size_t(batch_size * T)), y(size_t(batch_size * T));
    const int64_t accum = batch_size / mb;
    PerplexityResult r;
    r.split = split;
    r.batches = n;
    r.tokens = n * batch_size * T;
    for (int64_t i = 0; i < n; ++i) {
        data::batch_stream_get(stream, i, x.data(), y.data());
        data::batch_stream_check_ids(stream, i, x.data(), y.data(), m.cfg->model.vocab_size);
        double lm = 0;
        for (int64_t k = 0; k < accum; ++k)
            lm += model_eval(m, x.data() + k * mb * T, y.data() + k * mb * T).lm_loss / double(accum);
        r.loss += lm / double(n);
        if (progress) progress(i + 1, n);
    }
    r.perplexity = std::exp(r.loss);
    return r;
}

}  // namespace skew::eval
