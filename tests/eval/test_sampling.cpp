// Sampling for `skew sample` (eval/sampling.h) and generation through the KV cache: frequencies
// follow the tempered softmax (a chi-square bound), top-k and top-p cut the distribution, top-k 1
// equals greedy, greedy decoding and a fixed seed are deterministic.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "engine/error.h"
#include "eval/sampling.h"
#include "model/inference.h"
#include "runtime/session.h"
#include "tests/model/model_test_util.h"

using namespace skew;
using namespace skew::eval;

namespace {

// Pearson's chi-square of `counts` against probabilities p over n draws (cells with p > 0).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
    double x2 = 0;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] > 0) x2 += std::pow(double(counts[i]) - double(n) * p[i], 2) / (double(n) * p[i]);
    return x2;
}

std::vector<int64_t> draw_counts(const std::vector<float>& logits, int64_t V, const SamplingOptions& o, int64_t n) {
    std::vector<int64_t> counts(size_t(V), 0);
    for (int64_t i = 0; i < n; ++i) ++counts[size_t(sample_token(logits, V, o, 0, uint64_t(i)))];
    return counts;
}

const char* TINY_YAML = R"(
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
  init_std: 0.3
train:
  batch_size: 1
  seq_len: 16
  microbatch: 1
runtime:
  backend: cpu
  workspace_gib: 0
)";

// Generate `n` tokens after `prompt` through the KV cache.
std::vector<int32_t> generate(Model& m, const std::vector<int32_t>& prompt, int64_t n, const SamplingOptions& o,
                              uint32_t sample = 0) {
    KvCache kc = open_kv_cache(m, m.cfg->model.max_seq_len);
    std::vector<float> logits = kv_cache_forward(m, kc, prompt);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < n; ++i) {
        out.push_back(sample_token(logits, m.cfg->model.vocab_size, o, sample, uint64_t(kc.length)));
        if (i + 1 < n) logits = kv_cache_forward(m, kc, std::span<const int32_t>(&out.back(), 1));
    }
    return out;
}

std::unique_ptr<test::TestModel> random_model() {
    auto t = test::make_test_model(TINY_YAML, {}, 1);
    model_init(t->model, 7);
    for (const ParamRef& p : t->model.params)  // a router that routes (model_init zeroes it)
        if (p.info->role == Role::ROUTER) {
            std::vector<float> w(size_t(p.numel()));
            for (size_t i = 0; i < w.size(); ++i) w[i] = float(std::sin(double(i) * 1.7) * 0.5);
            test::set_weight(t->model, p, w);
        }
    return t;
}

}  // namespace

// 4 degrees of freedom: P(chi2 > 18.47) = 0.001 for a correct sampler. Drawing at temperature 1
// instead of 0.7 gives chi2 in the thousands at this n; a padded column or an off-by-one token
// breaks it further.
TEST_CASE("sampling frequencies follow the tempered softmax (chi-square bound)", "[eval][sampling]") {
    const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 0.7f, 0.0f, 50.0f, 50.0f, 50.0f};  // V = 5, padded to 8
    SamplingOptions o;
    o.temperature = 0.7;
    o.seed = 11;
    const int64_t n = 20000;
    const std::vector<double> p = sampling_distribution(logits, 5, o);
    double z = 0;
    for (int i = 0; i < 5; ++i) z += std::exp(double(logits[size_t(i)]) / 0.7);
    for (int i = 0; i < 5; ++i) CHECK(std::fabs(p[size_t(i)] - std::exp(double(logits[size_t(i)]) / 0.7) / z) < 1e-12);
    const auto counts = draw_counts(logits, 5, o, n);
    const double x2 = chi_square(counts, p, n);
    INFO("chi-square " << x2);
    CHECK(x2 < 18.47);
    SamplingOptions t1 = o;
    t1.temperature = 1.0;
    CHECK(chi_square(draw_counts(logits, 5, t1, n), p, n) > 100.0);  // the bound can fail
}

TEST_CASE("top-k and top-p keep the most probable tokens and renormalize", "[eval][sampling]") {
    const std::vector<float> logits = {std::log(0.1f), std::log(0.4f), std::log(0.2f), std::log(0.3f)};
    SamplingOptions o;
    o.top_k = 2;
    auto p = sampling_distribution(logits, 4, o);
    CHECK(p[0] == 0.0);
    CHECK(p[2] == 0.0);
    CHECK(std::fabs(p[1] - 4.0 / 7.0) < 1e-6);
    CHECK(std::fabs(p[3] - 3.0 / 7.0) < 1e-6);
    o.top_k = 0;
    o.top_p = 0.75;  // 0.4 + 0.3 = 0.7 < 0.75: the 0.2 token is needed too
    p = sampling_distribution(logits, 4, o);
    CHECK(p[0] == 0.0);
    CHECK(std::fabs(p[2] - 0.2 / 0.9) < 1e-6);
    const int64_t n = 20000;
    const auto counts = draw_counts(logits, 4, o, n);
    CHECK(counts[0] == 0);
    CHECK(chi_square(counts, p, n) < 13.82);  // 3 cells, 2 dof: P(chi2 > 13.82) = 0.001
    o.top_p = 0.0;
    CHECK_THROWS_WITH(sampling_distribution(logits, 4, o), Catch::Contains("--top-p"));
}

TEST_CASE("greedy decoding through the KV cache is deterministic and top-k 1 equals greedy", "[eval][sampling]") {
    auto t = random_model();
    const std::vector<int32_t> prompt = {5, 17, 42, 3};
    SamplingOptions greedy;
    greedy.temperature = 0.0;
    const auto a = generate(t->model, prompt, 10, greedy);
    const auto b = generate(t->model, prompt, 10, greedy);
    CHECK(a == b);
    // greedy picks the argmax of the uncached forward at every step
    std::vector<int32_t> seq = prompt;
    for (int32_t tok : a) seq.push_back(tok);
    std::vector<int32_t> tokens(16, 0), targets(16, 0);
    for (size_t i = 0; i + 1 < seq.size(); ++i) tokens[i] = seq[i], targets[i] = seq[i + 1];
    for (int64_t r = 3; r < 13; ++r) t->model.probe_rows.push_back(r);
    const LossParts lp = model_eval(t->model, tokens.data(), targets.data());
    for (size_t r = 0; r < 10; ++r) {
        const float* row = lp.probe_logits.data() + r * 128;
        const int64_t best = std::max_element(row, row + 96) - row;
        INFO("step " << r);
        CHECK(a[r] == best);
    }
    SamplingOptions top1;
    top1.temperature = 1.5;
    top1.top_k = 1;
    top1.seed = 99;
    CHECK(generate(t->model, prompt, 10, top1) == a);
}

TEST_CASE("the same seed gives the same sample, another seed or sample index another", "[eval][sampling]") {
    auto t = random_model();
    const std::vector<int32_t> prompt = {1, 2, 3};
    SamplingOptions o;
    o.temperature = 1.0;
    o.seed = 5;
    const auto a = generate(t->model, prompt, 12, o);
    CHECK(generate(t->model, prompt, 12, o) == a);
    SamplingOptions o2 = o;
    o2.seed = 6;
    CHECK(generate(t->model, prompt, 12, o2) != a);
    CHECK(generate(t->model, prompt, 12, o, 1) != a);
    CHECK(sampling_uniform(5, 0, 3) == sampling_uniform(5, 0, 3));
    CHECK(sampling_uniform(5, 0, 3) != sampling_uniform(5, 0, 4));
}
