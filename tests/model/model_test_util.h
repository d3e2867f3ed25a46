// Helpers for the whole-model tests: a model built from YAML text + overrides on the CPU backend
// (config -> parameter table -> plan -> host arena -> Model view), host copies of weights and
// gradients, and normalized error between tensors.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/kernels/harness.h"

namespace skew::test {

/// A CPU backend and a training session on it (runtime/session.h), with the session's parts by
/// name. Members are destroyed in reverse: the session before the backend it runs on.
struct TestModel {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Session> session;
    Config& cfg;
    ParamTable& table;
    MemoryPlan& plan;
    Arena& arena;
    Model& model;

    TestModel(std::unique_ptr<Backend> b, std::unique_ptr<Session> s)
        : backend(std::move(b)), session(std::move(s)), cfg(session->cfg), table(session->table), plan(session->plan),
          arena(session->arena), model(session->model) {}
};

/// A CPU backend and `cfg`'s session on it as `spec` says (open_session).
inline std::unique_ptr<TestModel> open_test_model(const Config& cfg, const SessionSpec& spec) {
    auto backend = make_cpu_backend();
    auto session = open_session(cfg, *backend, spec);
    return std::make_unique<TestModel>(std::move(backend), std::move(session));
}

/// Build a CPU model from YAML text and overrides with `microbatch` sequences per forward (a
/// SkewAdam training session). With `logits_only_head`, act.logits holds only one chunk of
/// `head_chunk_rows` tokens' fp32 logits (no fused-head workspace: SessionSpec::lm_head_chunk_tokens),
/// so the model takes the chunked matmul + cross-entropy path.
inline std::unique_ptr<TestModel> make_test_model(const std::string& yaml, const std::vector<std::string>& overrides,
                                                  int64_t microbatch, bool logits_only_head = false,
                                                  int64_t head_chunk_rows = 512) {
    const Config cfg = load_config_text(yaml, "test.yaml", overrides);
    const OptimizerConfig opt = builtin_optimizer("skewadam");
    SessionSpec spec;
    spec.optimizer = &opt;
    spec.microbatch = microbatch;
    if (logits_only_head) spec.lm_head_chunk_tokens = head_chunk_rows;
    return open_test_model(cfg, spec);
}

/// A parameter's weight (bf16 or fp32) or gradient widened to fp32 on the host.
inline std::vector<float> to_host(ConstTensorRef t, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        out[size_t(i)] = t.type == ScalarType::BF16 ? bf16_to_f32(static_cast<const bf16*>(t.data)[i])
                                                    : static_cast<const float*>(t.data)[i];
    return out;
}

inline std::vector<float> grad_host(const ParamRef& p) { return to_host(ConstTensorRef(p.grad), p.numel()); }

/// Overwrite a parameter's weight from fp32 host values (bf16 weights rounded to nearest even).
inline void set_weight(Model& m, const ParamRef& p, const std::vector<float>& v) {
    m.backend->convert(TensorRef(p.weight, p.info->dtype == DType::BF16 ? ScalarType::BF16 : ScalarType::F32),
                       ConstTensorRef(v.data()), p.numel());
}

/// ||a - b|| / max(||b||, floor): the normalized error of a against the reference b; NaN when
/// any element of either is NaN (so a partly-NaN output fails every `<=` limit).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-12) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(b[i]);
        num += d * d;
        den += double(b[i]) * double(b[i]);
    }
    if (std::isnan(num) || std::isnan(den)) return NAN;
    return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

/// max |a_i|; NaN when any element is NaN.
inline double max_abs(const std::vector<float>& a) {
    double m = 0.0;
    for (float x : a) m = max_nan(m, double(std::fabs(x)));
    return m;
}

/// A deterministic token batch in [0, vocab): (n) int32 from a small LCG.
inline std::vector<int32_t> lcg_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (auto& x : t) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x = int32_t((s >> 33) % uint64_t(vocab));
    }
    return t;
}

}  // namespace skew::test
