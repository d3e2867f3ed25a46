// Log-likelihood scoring of multiple-choice items and their metrics, as the LM Evaluation Harness
// v0.4 computes them (docs/evaluation.md): joint encoding split at the context's token count,
// left truncation to the model's positions, summed continuation log-probabilities, acc and
// acc_norm (divided by the choice's length in code points), standard error of the mean.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/tasks.h"

namespace skew::eval {

/// One loglikelihood request in tokens: the model reads `tokens` and the last `n_continuation`
/// of them are scored (each given everything before it).
struct TokenRequest {
    std::vector<int32_t> tokens;  // context (possibly left-truncated) + continuation
    int64_t n_continuation = 0;
    bool truncated = false;  // context tokens were dropped on the left
};

/// The harness's _encode_pair: trailing whitespace of the context (Python's rstrip: all of Unicode's,
/// py_isspace) moves to the continuation;
/// ctx = enc(context), whole = enc(context + continuation), continuation tokens = whole[len(ctx):].
/// An empty context becomes <|endoftext|>. Then the request is cut to its last max_tokens tokens
/// (max_tokens = the model's positions + 1, as the harness keeps L + 1 and feeds L). Throws
/// skew::Error when the continuation encodes to no token or alone exceeds max_tokens - 1.
TokenRequest encode_request(const data::Tokenizer& tok, const std::string& context, const std::string& continuation,
                            int64_t max_tokens);

/// Per-choice log-likelihoods of one item and its 0/1 outcomes.
struct ItemScore {
    std::vector<double> loglik;  // per choice: Σ log p(continuation tokens), nats
    bool correct = false;        // argmax loglik == gold (ties to the lowest index)
    bool correct_norm = false;   // argmax loglik / norm_chars == gold
};

/// acc and acc_norm of an item from its choices' log-likelihoods (float64 division, np.argmax ties).
ItemScore score_item(const McItem& item, const std::vector<double>& loglik);

/// Mean and standard error of 0/1 outcomes: mean, sqrt(p(1-p)/(n-1)) (the harness's
/// mean_stderr: sample standard deviation over sqrt(n)); stderr 0 for n < 2.
struct MeanStderr {
    double mean = 0.0;
    double standard_error = 0.0;
};
MeanStderr mean_stderr(const std::vector<int>& outcomes);

/// The result of a task: n items, acc and acc_norm with standard errors, truncated requests.
struct TaskResult {
    std::string name;  // the format name
    std::string file;
    int64_t n = 0;
    MeanStderr acc, acc_norm;
    int64_t truncated_requests = 0;
    int64_t requests = 0;
    std::vector<ItemScore> items;
};

/// Score every item: encode each choice's request, compute its log-likelihood with `logprobs`
/// (a batch of token sequences -> per-token log-probabilities, as model_token_logprobs), in
/// batches of `batch_requests` sequences, calling `progress(done, total)` after each batch.
TaskResult score_task(
    const std::vector<McItem>& items, TaskFormat format, const data::Tokenizer& tok, int64_t max_tokens,
    int64_t batch_requests,
    const std::function<std::vector<std::vector<float>>(const std::vector<std::vector<int32_t>>&)>& logprobs,
    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace skew::eval
