// train.recompute on the CUDA backend (model/activations.h; docs/design.md "Activation recompute"):
// one training step of configs/tiny.yaml (two microbatches, router noise on, fp32 gradients) under
// block, attention and none, each over its own plan and arena. The model is written once over the
// Backend interface, so the modes run the same CUDA ops on the same values; the CUDA kernels use
// integer atomics only (routing counts) and cuBLASLt is run-to-run reproducible on one device, so
// the gradients are expected bit-identical. Two checks, so that a failure says which property broke:
// the modes agree within NMSE 1e-6 (a wrong recompute, stale slot or different router noise gives
// NMSE >= 1e-3), and, separately, bit for bit. Skipped where no GPU is visible (gpu_main.cpp).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "model/model.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/test_paths.h"

using namespace skew;
using namespace skew::test;

namespace {

constexpr double MODE_GRAD_NMSE = 1e-6;  // between modes on one device (expected 0)

std::string tiny_config_path() { return skew::test::source_path("configs/tiny.yaml"); }

struct ModeStep {
    std::vector<double> lm, balance, z;
    std::vector<std::vector<int64_t>> counts;
    std::vector<std::vector<float>> grads;  // fp32 gradients on the host
    std::vector<std::string> names;
    int64_t plan_activation_bytes = 0;
};

ModeStep cuda_step(const std::string& mode) {
    const Config cfg =
        load_config(tiny_config_path(), {"runtime.grad_dtype=fp32", "runtime.backend=cuda", "train.recompute=" + mode});
    const OptimizerConfig skewadam = builtin_optimizer("skewadam");
    SessionSpec spec;
    spec.optimizer = &skewadam;
    spec.microbatch = cfg.train.microbatch;
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
    REQUIRE(accum >= 2);
    cuda::CudaBackend& dev = gpu();
    dev.synchronize();
    const auto session = open_session(cfg, dev, spec);  // binds the arena's scratch and widening buffer
    const MemoryPlan& plan = session->plan;
    Model& m = session->model;
    REQUIRE(m.act.recompute == *parse_choice<Recompute>(mode));
    REQUIRE(plan.find("ws.cuda_scratch") >= 0);
    model_init(m, uint64_t(cfg.train.seed));

    std::vector<int32_t> stream(size_t(cfg.train.batch_size * T + 1));
    uint64_t s = 7;
    for (auto& t : stream) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t = int32_t((s >> 33) % uint64_t(cfg.model.vocab_size));
    }
    ModeStep r;
    r.plan_activation_bytes = plan.activation_bytes;
    model_zero_grads(m);
    for (int64_t i = 0; i < accum; ++i) {
        const int32_t* x = stream.data() + i * mb * T;
        const LossParts lp = model_forward_backward(m, x, x + 1, i, 3, accum, true);
        r.lm.push_back(lp.lm_loss);
        r.balance.push_back(lp.balance_loss);
        r.z.push_back(lp.z_loss);
        for (const MoeStats& st : lp.moe) r.counts.push_back(st.counts);
    }
    dev.synchronize();
    for (const ParamRef& p : m.params) {
        REQUIRE(p.grad.type == ScalarType::F32);
        std::vector<float> g(size_t(p.numel()));
        dev.copy_to_host(g.data(), p.grad.data, p.numel() * int64_t(sizeof(float)));
        r.grads.push_back(std::move(g));
        r.names.push_back(p.info->name);
    }
    return r;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? num / den : num;
}

const std::vector<ModeStep>& mode_steps() {
    static const std::vector<ModeStep> steps = [] {
        std::vector<ModeStep> v;
        for (const char* mode : {"block", "attention", "none"}) v.push_back(cuda_step(mode));
        return v;
    }();
    return steps;
}

}  // namespace

TEST_CASE(
    "configs/tiny.yaml on the CUDA backend: train.recompute block, attention and none give the same "
    "losses, routing and gradients",
    "[gpu][train][recompute]") {
    SKEW_REQUIRE_GPU();
    const std::vector<ModeStep>& s = mode_steps();
    CHECK(s[1].plan_activation_bytes > s[0].plan_activation_bytes);
    CHECK(s[2].plan_activation_bytes > s[1].plan_activation_bytes);
    for (size_t k = 1; k < s.size(); ++k) {
        INFO((k == 1 ? "attention" : "none") << " vs block");
        CHECK(s[k].counts == s[0].counts);
        REQUIRE(s[k].lm.size() == s[0].lm.size());
        for (size_t i = 0; i < s[0].lm.size(); ++i) {
            CHECK(s[k].lm[i] == Approx(s[0].lm[i]).epsilon(1e-6));
            CHECK(s[k].balance[i] == Approx(s[0].balance[i]).epsilon(1e-6));
            CHECK(s[k].z[i] == Approx(s[0].z[i]).epsilon(1e-6));
        }
        for (size_t i = 0; i < s[0].grads.size(); ++i) {
            const double e = nmse(s[k].grads[i], s[0].grads[i]);
            INFO(s[0].names[i] << " NMSE " << e);
            CHECK(e <= MODE_GRAD_NMSE);
        }
    }
}

TEST_CASE("configs/tiny.yaml on the CUDA backend: train.recompute modes are bit-identical (deterministic kernels)",
          "[gpu][train][recompute]") {
    SKEW_REQUIRE_GPU();
    const std::vector<ModeStep>& s = mode_steps();
    for (size_t k = 1; k < s.size(); ++k) {
        INFO((k == 1 ? "attention" : "none") << " vs block");
        CHECK(s[k].lm == s[0].lm);
        CHECK(s[k].balance == s[0].balance);
        CHECK(s[k].z == s[0].z);
        size_t differ = 0;
        std::string first;
        for (size_t i = 0; i < s[0].grads.size(); ++i)
            if (std::memcmp(s[k].grads[i].data(), s[0].grads[i].data(), s[0].grads[i].size() * sizeof(float)) != 0) {
                if (first.empty()) first = s[0].names[i];
                ++differ;
            }
        INFO(differ << " gradients not bit-identical, the first " << first);
        CHECK(differ == 0);
    }
}
