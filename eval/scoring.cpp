// Multiple-choice scoring as the LM Evaluation Harness v0.4 does it (docs/evaluation.md):
// HFLM._encode_pair and _loglikelihood_tokens (left truncation, summed log-probabilities),
// ConfigurableTask.process_results (acc, acc_norm) and metrics.mean_stderr.
#include "eval/scoring.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "eval/py_text.h"

namespace skew::eval {

TokenRequest encode_request(const data::Tokenizer& tok, const std::string& context_in,
                            const std::string& continuation_in, int64_t max_tokens) {
    // trailing whitespace of the context belongs to the continuation: Python's context.rstrip()
    const std::string context = py_rstrip(context_in);
    const std::string continuation = context_in.substr(context.size()) + continuation_in;

    TokenRequest r;
    std::vector<int32_t> ctx, cont;
    if (context.empty()) {
        if (tok.eot < 0 && tok.bos < 0)
            fail("an empty context starts from the end-of-text token, and the tokenizer {} has none", tok.source);
        ctx = {tok.eot >= 0 ? tok.eot : tok.bos};
        cont = data::tokenizer_encode(tok, continuation);
    } else {
        ctx = data::tokenizer_encode(tok, context);
        const std::vector<int32_t> whole = data::tokenizer_encode(tok, context + continuation);
        if (whole.size() > ctx.size()) cont.assign(whole.begin() + int64_t(ctx.size()), whole.end());
    }
    if (cont.empty()) fail("the continuation '{}' encodes to no token after the context '{}'", continuation, context);
    if (int64_t(cont.size()) > max_tokens - 1)
        fail("the continuation '{}' has {} tokens; the model has {} positions", continuation, cont.size(),
             max_tokens - 1);
    r.tokens = ctx;
    r.tokens.insert(r.tokens.end(), cont.begin(), cont.end());
    r.n_continuation = int64_t(cont.size());
    if (int64_t(r.tokens.size()) > max_tokens) {
        r.tokens.erase(r.tokens.begin(), r.tokens.end() - max_tokens);
        r.truncated = true;
    }
    return r;
}

ItemScore score_item(const McItem& item, const std::vector<double>& loglik) {
    if (loglik.size() != item.contexts.size() || loglik.empty())
        fail("score_item: {} log-likelihoods for {} choices", loglik.size(), item.contexts.size());
    ItemScore s;
    s.loglik = loglik;
    size_t best = 0, best_norm = 0;
    double best_norm_value = loglik[0] / double(std::max<int64_t>(1, item.norm_chars[0]));
    for (size_t i = 1; i < loglik.size(); ++i) {
        if (loglik[i] > loglik[best]) best = i;
        const double v = loglik[i] / double(std::max<int64_t>(1, item.norm_chars[i]));
        if (v > best_norm_value) best_norm = i, best_norm_value = v;
    }
    s.correct = int64_t(best) == item.gold;
    s.correct_norm = int64_t(best_norm) == item.gold;
    return s;
}

MeanStderr mean_stderr(const std::vector<int>& outcomes) {
    MeanStderr r;
    const double n = double(outcomes.size());
    if (outcomes.empty()) return r;
    double sum = 0;
    for (int o : outcomes) sum += o;
    r.mean = sum / n;
    if (outcomes.size() < 2) return r;
    double ss = 0;
    for (int o : outcomes) ss += (o - r.mean) * (o - r.mean);
    r.standard_error = std::sqrt(ss / (n - 1.0)) / std::sqrt(n);
    return r;
}

TaskResult score_task(
    const std::vector<McItem>& items, TaskFormat format, const data::Tokenizer& tok, int64_t max_tokens,
    int64_t batch_requests,
    const std::function<std::vector<std::vector<float>>(const std::vector<std::vector<int32_t>>&)>& logprobs,
    const std::function<void(int64_t, int64_t)>& progress) {
    TaskResult res;
    res.name = choice_name(format);
    res.n = int64_t(items.size());
    // every request, in item order
    std::vector<TokenRequest> reqs;
    std::vector<size_t> first(items.size() + 1, 0);
    for (size_t i = 0; i < items.size(); ++i) {
        first[i] = reqs.size();
        for (size_t c = 0; c < items[i].contexts.size(); ++c) {
            try {
                reqs.push_back(encode_request(tok, items[i].contexts[c], items[i].continuations[c], max_tokens));
            } catch (const Error& e) {
                fail("line {} choice {}: {}", items[i].line, c, e.what());
            }
            res.truncated_requests += reqs.back().truncated ? 1 : 0;
        }
    }
    first[items.size()] = reqs.size();
    res.requests = int64_t(reqs.size());
    std::vector<double> ll(reqs.size(), 0.0);
    const size_t step = size_t(std::max<int64_t>(1, batch_requests));
    for (size_t r0 = 0; r0 < reqs.size(); r0 += step) {
        const size_t r1 = std::min(reqs.size(), r0 + step);
        std::vector<std::vector<int32_t>> batch;
        for (size_t r = r0; r < r1; ++r) batch.push_back(reqs[r].tokens);
        const auto lp = logprobs(batch);
        for (size_t r = r0; r < r1; ++r) {
            // v[i] scores token i + 1; the continuation is the last n tokens; summed in float32 as
            // the harness sums its float32 log-probabilities
            const std::vector<float>& v = lp[r - r0];
            float sum = 0.0f;
            for (size_t i = v.size() - size_t(reqs[r].n_continuation); i < v.size(); ++i) sum += v[i];
            ll[r] = double(sum);
        }
        if (progress) progress(int64_t(r1), int64_t(reqs.size()));
    }
    std::vector<int> acc, acc_norm;
    for (size_t i = 0; i < items.size(); ++i) {
        std::vector<double> item_ll(ll.begin() + int64_t(first[i]), ll.begin() + int64_t(first[i + 1]));
        res.items.push_back(score_item(items[i], item_ll));
        acc.push_back(res.items.back().correct ? 1 : 0);
        acc_norm.push_back(res.items.back().correct_norm ? 1 : 0);
    }
    res.acc = mean_stderr(acc);
    res.acc_norm = mean_stderr(acc_norm);
    return res;
}

}  // namespace skew::eval
