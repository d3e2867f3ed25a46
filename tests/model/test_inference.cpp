// Inference (model/inference.h) on the CPU backend: per-token log-probabilities against an
// independent PyTorch computation (tests/reference/eval/make_logprobs.py), and the KV cache's
// logits against the uncached full forward at every position, on the golden model's weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "engine/error.h"
#include "golden_fixture.h"
#include "model/inference.h"
#include "model_test_util.h"
#include "runtime/session.h"

using namespace skew;
using namespace skew::test;

namespace {

std::string source_path(const std::string& rel) { return std::string(SKEW_SOURCE_DIR) + "/" + rel; }

// A golden model of tests/reference/model: its YAML, its weights' fixture and the script that writes it.
struct GoldenVariant {
    const char* yaml;
    const char* inputs;
    const char* make;
};
const GoldenVariant PAPER{GOLDEN_YAML, "tests/reference/model/golden_inputs.bin",
                          "tests/reference/model/make_golden.py"};
const GoldenVariant LLAMA{LLAMA_GOLDEN_YAML, "tests/reference/model/golden_llama_inputs.bin",
                          "tests/reference/model/make_golden_llama.py"};
const GoldenVariant QWEN3{QWEN3_GOLDEN_YAML, "tests/reference/model/golden_qwen3_inputs.bin",
                          "tests/reference/model/make_golden_llama.py"};
const GoldenVariant QWEN2MOE{QWEN2MOE_GOLDEN_YAML, "tests/reference/model/golden_qwen2moe_inputs.bin",
                             "tests/reference/model/make_golden_llama.py"};

// A CPU model of `microbatch` sequences carrying the variant's golden weights (the paper's block,
// the rope + rmsnorm + untied-head model of make_golden_llama.py, or its Qwen3 or Qwen2-MoE
// variant), with `overrides`; a parameter the fixture lacks (an override's) gets small seeded values.
std::unique_ptr<TestModel> golden_model(int64_t microbatch, const GoldenVariant& v = PAPER,
                                        const std::vector<std::string>& overrides = {}) {
    auto in = read_golden_records(source_path(v.inputs), v.make);
    auto t = make_test_model(v.yaml, overrides, microbatch);
    for (const ParamRef& p : t->model.params) {
        const auto it = in.find("weight." + p.info->name);
        if (it == in.end()) {
            REQUIRE_FALSE(overrides.empty());
            std::vector<float> w;
            for (int32_t x : lcg_tokens(p.numel(), 1000, p.info->index)) w.push_back(float(x - 500) / 1000.0f);
            set_weight(t->model, p, w);
            continue;
        }
        set_weight(t->model, p, it->second.data);
    }
    return t;
}

// The golden token stream of row `row` (17 tokens: its inputs and the last target).
std::vector<int32_t> golden_row(int row) {
    auto in = read_golden_records(source_path("tests/reference/model/golden_inputs.bin"),
                                  "tests/reference/model/make_golden.py");
    std::vector<int32_t> s;
    for (int i = 0; i < 16; ++i) s.push_back(int32_t(in["tokens"].data[size_t(row * 16 + i)]));
    s.push_back(int32_t(in["targets"].data[size_t(row * 16 + 15)]));
    return s;
}

}  // namespace

// bf16 weights and activations against float64: the golden test's logits agree to ~1e-2
// relative; a log-probability of about -6 nats moves by a few hundredths (measured: max |error|
// 0.044 per token, sums within 0.2%). A wrong position (off by one), a wrong target or padding
// leaking into the scored positions moves a token by nats and a sum by far more than 1%.
TEST_CASE("token log-probabilities of variable-length sequences match the PyTorch reference", "[model][inference]") {
    auto ref = read_golden_records(source_path("tests/reference/eval/golden_logprobs.bin"),
                                   "tests/reference/eval/make_logprobs.py");
    auto t = golden_model(2);
    std::vector<std::vector<int32_t>> seqs;
    const size_t n_seq = ref["sequences"].shape[0];
    for (size_t i = 0; i < n_seq; ++i) {
        std::vector<int32_t> s;
        for (float v : ref["tokens." + std::to_string(i)].data) s.push_back(int32_t(v));
        seqs.push_back(s);
    }
    const auto lp = model_token_logprobs(t->model, seqs);  // 5 sequences: 3 microbatches, right padding
    REQUIRE(lp.size() == n_seq);
    double worst = 0;
    for (size_t i = 0; i < n_seq; ++i) {
        const auto& want = ref["logprobs." + std::to_string(i)].data;
        REQUIRE(lp[i].size() == want.size());
        double sum = 0, sum_ref = 0;
        for (size_t j = 0; j < want.size(); ++j) {
            INFO("sequence " << i << " token " << j + 1);
            CHECK(std::fabs(lp[i][j] - want[j]) <= 0.1);
            worst = std::max(worst, std::fabs(double(lp[i][j]) - want[j]));
            sum += lp[i][j];
            sum_ref += want[j];
        }
        INFO("sequence " << i << ": log-likelihood " << sum << " vs " << sum_ref);
        CHECK(std::fabs(sum - sum_ref) <= 0.01 * std::fabs(sum_ref));
    }
    WARN("token log-probabilities: worst |error| " << worst << " nats");
}

TEST_CASE("token log-probabilities refuse sequences longer than seq_len + 1 or with tokens outside the vocabulary",
          "[model][inference]") {
    auto t = golden_model(2);
    CHECK_THROWS_WITH(model_token_logprobs(t->model, {std::vector<int32_t>(18, 1)}),
                      Catch::Contains("sequence 0 has 18 tokens"));
    CHECK_THROWS_WITH(model_token_logprobs(t->model, {{1, 2, 96}}), Catch::Contains("outside the vocabulary"));
    CHECK_THROWS(model_token_logprobs(t->model, {std::vector<int32_t>{}}));
}

// The cached path computes each row with the same ops on fewer rows; CPU GEMMs round the same
// row the same way, so the logits agree to bf16 round-off (measured: max relative error ~1e-3).
static void check_kv_cache_equals_full_forward(const GoldenVariant& v, const std::vector<std::string>& overrides = {}) {
    auto full = golden_model(1, v, overrides);
    const std::vector<int32_t> s = golden_row(0);
    std::vector<int32_t> tokens(s.begin(), s.begin() + 16), targets(s.begin() + 1, s.end());
    for (int64_t r = 0; r < 16; ++r) full->model.probe_rows.push_back(r);
    const LossParts lp = model_eval(full->model, tokens.data(), targets.data());
    const int64_t Vp = 128;

    auto t = golden_model(1, v, overrides);
    for (int prefill : {1, 6, 16}) {
        KvCache kc = open_kv_cache(t->model, 16);
        std::vector<float> got =
            kv_cache_forward(t->model, kc, std::span<const int32_t>(tokens.data(), size_t(prefill)), true);
        REQUIRE(int64_t(got.size()) == prefill * Vp);
        for (int64_t p = prefill; p < 16; ++p) {
            const std::vector<float> row =
                kv_cache_forward(t->model, kc, std::span<const int32_t>(&tokens[size_t(p)], 1));
            got.insert(got.end(), row.begin(), row.end());
        }
        REQUIRE(kc.length == 16);
        for (int64_t p = 0; p < 16; ++p) {
            std::vector<float> a(got.begin() + p * Vp, got.begin() + (p + 1) * Vp);
            std::vector<float> b(lp.probe_logits.begin() + p * Vp, lp.probe_logits.begin() + (p + 1) * Vp);
            INFO("prefill " << prefill << ", position " << p << ": rel err " << rel_err(a, b));
            CHECK(rel_err(a, b) <= 1e-2);
        }
    }
}

TEST_CASE("the KV cache's logits equal the uncached full forward at every position", "[model][inference]") {
    check_kv_cache_equals_full_forward(PAPER);
}

// With rotary positions the cache holds rotated keys: a new row is rotated to its own position
// (pos0 = the cached length), an off-by-one or a cache rotated twice moves every later logit.
TEST_CASE("the KV cache of a rope + rmsnorm + untied-head model equals its full forward at every position",
          "[model][inference]") {
    check_kv_cache_equals_full_forward(LLAMA);
}

// Each new row's q and k are normalized per head before their rotation (model.qk_norm: per_head),
// with the projections' biases, at head_dim 16 > d_model / n_heads: a cache that skips the norm, adds
// a bias twice or sizes a row by d_model moves every logit.
TEST_CASE(
    "the KV cache of a model with QK-norm per head, head_dim != d_model / n_heads and q, k, v biases equals its full "
    "forward at every position",
    "[model][inference]") {
    check_kv_cache_equals_full_forward(QWEN3, {"model.attention_bias=true"});
}

// The shared experts and their gate run in the cached forward as in the training forward (one block
// forward, model/block.cpp, over the cache's rows): a row whose shared output is skipped, left ungated or added to the wrong
// rows moves its logits by far more than the bf16 round-off.
TEST_CASE("the KV cache of a model with gated shared experts (Qwen2-MoE) equals its full forward at every position",
          "[model][inference]") {
    check_kv_cache_equals_full_forward(QWEN2MOE);
}

TEST_CASE("the KV cache refuses positions beyond max_seq_len and tokens outside the table", "[model][inference]") {
    auto t = golden_model(1);
    CHECK_THROWS_WITH(open_kv_cache(t->model, 17), Catch::Contains("max_seq_len"));
    KvCache kc = open_kv_cache(t->model, 16);
    std::vector<int32_t> toks(16, 3);
    kv_cache_forward(t->model, kc, std::span<const int32_t>(toks.data(), 10));
    CHECK_THROWS_WITH(kv_cache_forward(t->model, kc, std::span<const int32_t>(toks.data(), 7)),
                      Catch::Contains("overflow the KV cache of 16 positions"));
    CHECK(kc.length == 10);
    const int32_t bad = 128;
    CHECK_THROWS_WITH(kv_cache_forward(t->model, kc, std::span<const int32_t>(&bad, 1)),
                      Catch::Contains("outside the embedding table"));
}
