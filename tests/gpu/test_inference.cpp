// Inference on the CUDA backend (model/inference.h) against the CPU backend and against itself:
// per-token log-probabilities of variable-length sequences, and the KV cache's logits (prefill +
// decode) equal to the uncached full forward at every position. configs/tiny.yaml (GQA 4/2, one
// MoE block of 8 experts), initialized alike on both backends (model_init: the router starts at
// zero, so routing is the tie-break to the lowest experts on both and cannot flip between them).
#include <filesystem>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"
#include "model/inference.h"
#include "model/model.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/test_paths.h"

using namespace skew;
using namespace skew::test;

namespace {

std::string tiny_config() { return skew::test::source_path("configs/tiny.yaml"); }

double rel(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += std::pow(double(a[i]) - b[i], 2), den += double(b[i]) * b[i];
    return std::sqrt(num / std::max(den, 1e-30));
}

struct Sides {
    std::unique_ptr<Backend> cpu;
    std::unique_ptr<Session> cpu_session, gpu_session;  // the shared GPU backend lets go of its arena with it
    Config& cfg;
    MemoryPlan& plan;
    Model& c;
    Model& g;

    Sides(std::unique_ptr<Backend> be, std::unique_ptr<Session> cs, std::unique_ptr<Session> gs)
        : cpu(std::move(be)), cpu_session(std::move(cs)), gpu_session(std::move(gs)), cfg(gpu_session->cfg),
          plan(gpu_session->plan), c(cpu_session->model), g(gpu_session->model) {}
};

// CPU and CUDA models of microbatch 2 over the same plan (sized for CUDA: one config), same initial weights.
std::unique_ptr<Sides> make_sides() {
    const Config cfg = load_config(tiny_config(), {"runtime.backend=cuda", "train.microbatch=2", "train.batch_size=2"});
    const OptimizerConfig adamw = builtin_optimizer("adamw");
    SessionSpec spec;
    spec.optimizer = &adamw;
    spec.microbatch = 2;
    auto cpu = make_cpu_backend();
    auto cs = open_session(cfg, *cpu, spec);
    auto gs = open_session(cfg, gpu(), spec);
    auto s = std::make_unique<Sides>(std::move(cpu), std::move(cs), std::move(gs));
    model_init(s->c, 42);
    model_init(s->g, 42);
    return s;
}

std::vector<int32_t> stream(int64_t n, uint32_t seed, int32_t vocab) {
    std::vector<int32_t> out(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& t : out) x = x * 1664525u + 1013904223u, t = int32_t((x >> 8) % uint32_t(vocab));
    return out;
}

}  // namespace

// Tolerance: bf16 activations on both backends with different GEMM kernels; the training-step
// test sees LM losses within 2e-3 nats. Per token: 0.02 nats.
TEST_CASE("gpu token log-probabilities of variable-length sequences match the CPU backend", "[gpu][inference]") {
    SKEW_REQUIRE_GPU();
    auto s = make_sides();
    const auto all = stream(200, 3, 50257);
    std::vector<std::vector<int32_t>> seqs;
    for (int64_t n : {33, 2, 17, 33, 9}) seqs.emplace_back(all.begin(), all.begin() + n);
    const auto lc = model_token_logprobs(s->c, seqs);
    const auto lg = model_token_logprobs(s->g, seqs);
    for (size_t i = 0; i < seqs.size(); ++i) {
        REQUIRE(lg[i].size() == lc[i].size());
        for (size_t j = 0; j < lc[i].size(); ++j) {
            INFO("sequence " << i << " token " << j);
            CHECK(std::fabs(lg[i][j] - lc[i][j]) <= 0.02);
        }
    }
}

// Cached vs uncached on the same backend: the same ops on fewer rows; relative error of each
// position's logits <= 1e-2 (a wrong cache position or KV head changes them by O(1)). CUDA vs CPU
// cached logits: <= 2e-2.
TEST_CASE("gpu KV cache logits equal the uncached forward at every position, and the CPU cache's", "[gpu][inference]") {
    SKEW_REQUIRE_GPU();
    auto s = make_sides();
    const int64_t T = s->cfg.train.seq_len, Vp = s->cfg.model.padded_vocab_size;
    const auto all = stream(2 * T + 1, 5, 50257);
    std::vector<int32_t> x(all.begin(), all.end() - 1), y(all.begin() + 1, all.end());
    for (int64_t r = 0; r < T; ++r) s->g.probe_rows.push_back(r);
    const LossParts full = model_eval(s->g, x.data(), y.data());

    KvCache kg = open_kv_cache(s->g, s->cfg.model.max_seq_len);
    KvCache kc = open_kv_cache(s->c, s->cfg.model.max_seq_len);
    const int64_t prefill = 7;
    std::vector<float> got = kv_cache_forward(s->g, kg, std::span<const int32_t>(x.data(), size_t(prefill)), true);
    std::vector<float> cpu = kv_cache_forward(s->c, kc, std::span<const int32_t>(x.data(), size_t(prefill)), true);
    for (int64_t p = prefill; p < T; ++p) {
        auto a = kv_cache_forward(s->g, kg, std::span<const int32_t>(&x[size_t(p)], 1));
        auto b = kv_cache_forward(s->c, kc, std::span<const int32_t>(&x[size_t(p)], 1));
        got.insert(got.end(), a.begin(), a.end());
        cpu.insert(cpu.end(), b.begin(), b.end());
    }
    for (int64_t p = 0; p < T; ++p) {
        const std::vector<float> a(got.begin() + p * Vp, got.begin() + (p + 1) * Vp);
        const std::vector<float> b(full.probe_logits.begin() + p * Vp, full.probe_logits.begin() + (p + 1) * Vp);
        const std::vector<float> c(cpu.begin() + p * Vp, cpu.begin() + (p + 1) * Vp);
        INFO("position " << p << ": cached vs uncached " << rel(a, b) << ", cuda vs cpu cache " << rel(a, c));
        CHECK(rel(a, b) <= 1e-2);
        CHECK(rel(a, c) <= 2e-2);
    }
}
