// Whole-model edge cases (docs/design.md "The paper's model"): gradient accumulation with
// the aux losses divided like the LM loss, idle experts, the zero-initialized router, large
// logits, initialization, global grad-norm and clipping.
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/error.h"
#include "kernels/common/philox.h"
#include "model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

// configs/tiny.yaml's shapes with a 512-token vocabulary (the tests' speed) and batch 8 x 32.
const char* TINY_YAML = R"(
model:
  vocab_size: 500
  padded_vocab_size: 512
  d_model: 64
  n_blocks: 2
  moe_blocks: [1]
  n_heads: 4
  n_kv_heads: 2
  d_ff: 128
  max_seq_len: 64
  n_experts: 8
  d_expert: 64
  top_k: 2
train:
  batch_size: 8
  seq_len: 32
  microbatch: 8
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
)";

const ParamRef& param(const Model& m, const std::string& name) {
    for (const ParamRef& p : m.params)
        if (p.info->name == name) return p;
    fail("no parameter {}", name);
}

// Random router weights N(0, std^2) from Philox (a stream of its own), so routing is not degenerate.
void randomize_router(Model& m, float std) {
    for (const BlockParams& b : m.blocks) {
        if (!b.moe) continue;
        std::vector<float> v(size_t(b.router.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = std * philox_normal({7, PHILOX_STREAM_GALORE}, 0, 99, i);
        set_weight(m, b.router, v);
    }
}

struct AccumResult {
    std::vector<std::vector<float>> grads;
    double lm = 0, balance = 0, z = 0;
};

// One optimizer step's gradients over batch_size 8 in `n_micro` microbatches.
AccumResult accumulate(const std::vector<std::string>& overrides, int64_t n_micro, bool noise, float router_std) {
    const int64_t mb = 8 / n_micro;
    auto t = make_test_model(TINY_YAML, overrides, mb);
    Model& m = t->model;
    model_init(m, 42);
    if (router_std > 0) randomize_router(m, router_std);
    const int64_t T = t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(8 * T + 1, t->cfg.model.vocab_size, 3);
    model_zero_grads(m);
    AccumResult r;
    for (int64_t i = 0; i < n_micro; ++i) {
        const int32_t* x = stream.data() + i * mb * T;
        LossParts lp = model_forward_backward(m, x, x + 1, i, 5, n_micro, noise);
        r.lm += lp.lm_loss / double(n_micro);
        r.balance += lp.balance_loss / double(n_micro);
        r.z += lp.z_loss / double(n_micro);
    }
    for (const ParamRef& p : m.params) r.grads.push_back(grad_host(p));
    return r;
}

void check_same_gradients(const AccumResult& a, const AccumResult& b, const Model& m, double tol) {
    CHECK(a.lm == Approx(b.lm).epsilon(1e-3));
    CHECK(a.balance == Approx(b.balance).epsilon(1e-3));
    CHECK(a.z == Approx(b.z).epsilon(1e-3));
    for (size_t i = 0; i < m.params.size(); ++i) {
        const double e = rel_err(b.grads[i], a.grads[i]);
        INFO(m.params[i].info->name << ": 4 x B/4 vs 1 x B rel err " << e);
        CHECK(e <= tol);
    }
}

}  // namespace

TEST_CASE("1 x B and 4 x B/4 give the same gradients, aux losses included", "[model]") {
    auto ref = make_test_model(TINY_YAML, {}, 8);  // parameter names for messages
    SECTION("zero-initialized router, no noise: balance and z-loss gradients scale by 1/accum") {
        // Every microbatch routes alike (experts 0 and 1), so the balance loss is the same function
        // per microbatch and the accumulated gradient must equal the full batch's exactly in math.
        AccumResult one = accumulate({"runtime.grad_dtype=fp32"}, 1, false, 0.0f);
        AccumResult four = accumulate({"runtime.grad_dtype=fp32"}, 4, false, 0.0f);
        check_same_gradients(one, four, ref->model, 1e-3);
        // the router's gradient comes from the aux losses and gates; it must not be zero
        CHECK(max_abs(one.grads[size_t(param(ref->model, "blocks.1.moe.router.weight").info->index)]) > 0.0);
    }
    SECTION("random router with noise, z-loss on, balance off: the noise follows the token") {
        AccumResult one = accumulate({"runtime.grad_dtype=fp32", "model.balance_loss_coef=0"}, 1, true, 0.3f);
        AccumResult four = accumulate({"runtime.grad_dtype=fp32", "model.balance_loss_coef=0"}, 4, true, 0.3f);
        check_same_gradients(one, four, ref->model, 1e-3);
    }
    SECTION("bf16 gradient buffers (the paper's): the same within bf16 accumulation error") {
        AccumResult one = accumulate({}, 1, false, 0.0f);
        AccumResult four = accumulate({}, 4, false, 0.0f);
        check_same_gradients(one, four, ref->model, 1e-2);
    }
}

TEST_CASE("the zero-initialized router routes deterministically and the balance loss equals alpha", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);
    const int32_t N = int32_t(8 * t->cfg.train.seq_len);
    const std::vector<int32_t> stream = lcg_tokens(N + 1, t->cfg.model.vocab_size, 11);
    LossParts a = model_eval(m, stream.data(), stream.data() + 1);
    LossParts b = model_eval(m, stream.data(), stream.data() + 1);
    REQUIRE(a.moe.size() == 1);
    // all logits equal -> uniform probabilities -> top-2 ties go to the lower indices 0 and 1
    std::vector<int64_t> want(8, 0);
    want[0] = want[1] = N;
    CHECK(a.moe[0].counts == want);
    CHECK(b.moe[0].counts == want);
    CHECK(a.lm_loss == b.lm_loss);
    // p̄ = 1/E, f = (1/2, 1/2, 0, ...): α·E·Σ p̄ f = α exactly; z = coef·(log E)^2
    CHECK(a.moe[0].balance_loss == Approx(0.05).epsilon(1e-6));
    CHECK(a.moe[0].z_loss == Approx(1e-4 * std::log(8.0) * std::log(8.0)).epsilon(1e-5));
    for (int64_t r = 0; r < N * 2; ++r) CHECK(m.act.topk_gate[1][r] == 0.5f);  // block 1 is the MoE block
}

TEST_CASE("an expert that receives no tokens has exactly zero gradient", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);  // zero router, no noise: experts 0 and 1 take every token
    const int64_t N = 8 * t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(N + 1, t->cfg.model.vocab_size, 5);
    model_zero_grads(m);
    model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, false);
    for (const char* w : {"w1", "w2", "w3"}) {
        const ParamRef& p = param(m, std::string("blocks.1.moe.experts.") + w);
        const std::vector<float> g = grad_host(p);
        const size_t per = g.size() / 8;
        for (size_t e = 0; e < 8; ++e) {
            double s = 0.0;
            for (size_t i = 0; i < per; ++i) s += std::fabs(g[e * per + i]);
            INFO("experts." << w << " expert " << e);
            if (e < 2) CHECK(s > 0.0);
            else CHECK(s == 0.0);
        }
    }
}

TEST_CASE("losses and gradients stay finite for logits in the hundreds", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);
    // final LayerNorm gain 3000 puts LM logits in the hundreds; a router of std 30 does the same
    // for the router logits (z-loss ~ coef * lse^2).
    set_weight(m, m.lnf_w, std::vector<float>(size_t(m.lnf_w.numel()), 3000.0f));
    randomize_router(m, 30.0f);
    const int64_t N = 8 * t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(N + 1, t->cfg.model.vocab_size, 9);
    m.probe_rows = {0, 1, 2};
    model_zero_grads(m);
    LossParts lp = model_forward_backward(m, stream.data(), stream.data() + 1, 0, 1, 1, true);
    INFO("lm " << lp.lm_loss << " z " << lp.z_loss << " max logit " << max_abs(lp.probe_logits));
    CHECK(max_abs(lp.probe_logits) > 100.0);
    CHECK(std::isfinite(lp.lm_loss));
    CHECK(lp.lm_loss > 1.0);
    CHECK(std::isfinite(lp.z_loss));
    CHECK(lp.z_loss > 1e-4 * 100.0 * 100.0 * 0.5);  // lse in the hundreds
    CHECK(std::isfinite(model_grad_norm(m)));
}

TEST_CASE("initialization follows the design and draws from Philox", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);
    auto stddev = [](const std::vector<float>& v) {
        double s = 0.0;
        for (float x : v) s += double(x) * x;
        return std::sqrt(s / double(v.size()));
    };
    const double out_std = 0.02 / std::sqrt(2.0 * 2);
    CHECK(stddev(to_host(param(m, "embed.tokens").w(), param(m, "embed.tokens").numel())) ==
          Approx(0.02).epsilon(0.02));
    CHECK(stddev(to_host(param(m, "blocks.1.moe.experts.w1").w(), param(m, "blocks.1.moe.experts.w1").numel())) ==
          Approx(0.02).epsilon(0.03));
    for (const char* name : {"blocks.0.attn.wo", "blocks.0.ffn.w3", "blocks.1.moe.experts.w3"}) {
        INFO(name);
        CHECK(stddev(to_host(param(m, name).w(), param(m, name).numel())) == Approx(out_std).epsilon(0.1));
    }
    CHECK(max_abs(to_host(param(m, "blocks.1.moe.router.weight").w(), 64 * 8)) == 0.0);
    for (float x : to_host(param(m, "blocks.0.ln1.weight").w(), 64)) CHECK(x == 1.0f);
    for (float x : to_host(param(m, "final_ln.bias").w(), 64)) CHECK(x == 0.0f);
    // element i of parameter p is init_std * philox_normal(seed, INIT, 0, p.index, i), rounded to bf16
    const ParamRef& wq = param(m, "blocks.0.attn.wq");
    const std::vector<float> w = to_host(wq.w(), wq.numel());
    for (uint64_t i : {0ull, 1ull, 777ull}) {
        const float want =
            bf16_to_f32(f32_to_bf16(0.02f * philox_normal({42, PHILOX_STREAM_INIT}, 0, wq.info->index, i)));
        CHECK(w[i] == want);
    }
    // another seed, other weights
    auto t2 = make_test_model(TINY_YAML, {}, 8);
    model_init(t2->model, 43);
    CHECK(to_host(param(t2->model, "blocks.0.attn.wq").w(), wq.numel()) != w);
}

TEST_CASE("global grad-norm and clipping", "[model]") {
    auto t = make_test_model(TINY_YAML, {"runtime.grad_dtype=fp32"}, 8);
    Model& m = t->model;
    model_init(m, 42);
    const int64_t N = 8 * t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(N + 1, t->cfg.model.vocab_size, 2);
    model_zero_grads(m);
    model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, true);
    double ss = 0.0;
    for (const ParamRef& p : m.params)
        for (float g : grad_host(p)) ss += double(g) * g;
    const double norm = model_grad_norm(m);
    CHECK(norm == Approx(std::sqrt(ss)).epsilon(1e-9));
    REQUIRE(norm > 0.0);
    CHECK(model_clip_gradients(m, 10.0 * norm) == Approx(norm));  // above the norm: untouched
    CHECK(model_grad_norm(m) == Approx(norm).epsilon(1e-9));
    CHECK(model_clip_gradients(m, 0.5 * norm) == Approx(norm));
    CHECK(model_grad_norm(m) == Approx(0.5 * norm).epsilon(1e-5));
    // zeroing: every gradient buffer is 0 again
    model_zero_grads(m);
    CHECK(model_grad_norm(m) == 0.0);
    // a second microbatch accumulates (+=): twice the same batch with accum 1 doubles the gradient
    model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, false);
    const double once = model_grad_norm(m);
    model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, false);
    CHECK(model_grad_norm(m) == Approx(2.0 * once).epsilon(1e-5));
}

TEST_CASE("eval gives the training forward's loss without noise and touches no gradient", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);
    randomize_router(m, 0.3f);
    const int64_t N = 8 * t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(N + 1, t->cfg.model.vocab_size, 4);
    model_zero_grads(m);
    LossParts e = model_eval(m, stream.data(), stream.data() + 1);
    CHECK(model_grad_norm(m) == 0.0);
    LossParts f = model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, false);
    CHECK(e.lm_loss == f.lm_loss);
    CHECK(e.balance_loss == f.balance_loss);
    CHECK(e.z_loss == f.z_loss);
    CHECK(e.moe[0].counts == f.moe[0].counts);
    LossParts noisy = model_forward_backward(m, stream.data(), stream.data() + 1, 0, 0, 1, true);
    CHECK(noisy.moe[0].counts != e.moe[0].counts);  // training noise changes the routing
}

TEST_CASE("bad batches are errors, not crashes", "[model]") {
    auto t = make_test_model(TINY_YAML, {}, 8);
    Model& m = t->model;
    model_init(m, 42);
    const int64_t N = 8 * t->cfg.train.seq_len;
    std::vector<int32_t> tokens = lcg_tokens(N, t->cfg.model.vocab_size, 1), targets = tokens;
    targets[3] = 500;  // vocab_size: a padding column is not a valid target
    CHECK_THROWS_AS(model_eval(m, tokens.data(), targets.data()), Error);
    targets[3] = 0;
    tokens[5] = 512;  // outside the embedding table
    CHECK_THROWS_AS(model_forward_backward(m, tokens.data(), targets.data(), 0, 0, 1, true), Error);
    CHECK_THROWS_AS(model_forward_backward(m, targets.data(), targets.data(), 0, 0, 0, true), Error);
}

TEST_CASE("the chunked LM head (when the backend's fused workspace does not fit) gives the fused head's result",
          "[model]") {
    // act.logits without the fused head's workspace: the model falls back to matmul +
    // cross-entropy ops over chunks of act.logits.
    auto fused = make_test_model(TINY_YAML, {"runtime.grad_dtype=fp32"}, 8);
    auto chunked = make_test_model(TINY_YAML, {"runtime.grad_dtype=fp32"}, 8, true);
    REQUIRE(fused->model.act.fused_head);
    REQUIRE_FALSE(chunked->model.act.fused_head);
    const int64_t N = 8 * fused->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(N + 1, fused->cfg.model.vocab_size, 6);
    LossParts a, b;
    for (TestModel* t : {fused.get(), chunked.get()}) {
        model_init(t->model, 42);
        randomize_router(t->model, 0.3f);
        model_zero_grads(t->model);
        (t == fused.get() ? a : b) = model_forward_backward(t->model, stream.data(), stream.data() + 1, 0, 3, 2, true);
    }
    CHECK(b.lm_loss == Approx(a.lm_loss).epsilon(1e-5));
    CHECK(b.total == Approx(a.total).epsilon(1e-5));
    for (size_t i = 0; i < fused->model.params.size(); ++i) {
        const double e = rel_err(grad_host(chunked->model.params[i]), grad_host(fused->model.params[i]));
        INFO(fused->model.params[i].info->name << " rel err " << e);
        CHECK(e <= 1e-3);
    }
    LossParts ea = model_eval(fused->model, stream.data(), stream.data() + 1);
    LossParts eb = model_eval(chunked->model, stream.data(), stream.data() + 1);
    CHECK(eb.lm_loss == Approx(ea.lm_loss).epsilon(1e-5));
}

TEST_CASE("configs/tiny.yaml: the initial loss is ln V and plain gradient descent lowers it", "[model]") {
    Config cfg = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml", {"runtime.grad_dtype=fp32"});
    const OptimizerConfig opt = builtin_optimizer("skewadam");
    SessionSpec spec;
    spec.optimizer = &opt;
    spec.microbatch = cfg.train.microbatch;
    auto t = open_test_model(cfg, spec);
    Model& m = t->model;
    model_init(m, uint64_t(cfg.train.seed));
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
    REQUIRE(accum == 2);
    const std::vector<int32_t> stream = lcg_tokens(cfg.train.batch_size * T + 1, 1000, 8);  // common ids
    auto step = [&](uint32_t s) {
        model_zero_grads(m);
        double lm = 0.0;
        for (int64_t i = 0; i < accum; ++i)
            lm += model_forward_backward(m, stream.data() + i * mb * T, stream.data() + i * mb * T + 1, i, s, accum)
                      .lm_loss /
                  double(accum);
        return lm;
    };
    // N(0, 0.02) weights: near-uniform predictions over the 50,257 real tokens
    const double first = step(0);
    CHECK(first == Approx(std::log(50257.0)).margin(0.05));
    // SGD w -= lr * g on the host (fp32 grads, bf16 weights rounded to nearest): the loss falls
    double last = first;
    for (uint32_t s = 1; s <= 8; ++s) {
        model_clip_gradients(m, 1.0);
        for (const ParamRef& p : m.params) {
            std::vector<float> w = to_host(p.w(), p.numel());
            const std::vector<float> g = grad_host(p);
            for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.5f * g[i];
            set_weight(m, p, w);
        }
        last = step(s);
    }
    INFO("loss " << first << " -> " << last);
    CHECK(last < first - 0.5);
}
