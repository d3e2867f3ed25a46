// One optimizer's training state over a session's arena, stepped exactly as the trainer's optimizer
// phase steps it (idle experts, the optimizer or the per-expert deferred step): the deferred-expert
// tests' shared fixture on the CPU (tests/train) and the CUDA backend (tests/gpu), the backend as
// the config's runtime.backend says.
#pragma once
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_runner.h"
#include "runtime/backend_registry.h"
#include "runtime/session.h"
#include "train/deferred_experts.h"
#include "train/idle_experts.h"

namespace skew::test {

struct Trial {
    OptimizerConfig opt;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Session> session;  // the real layout: lifetime sharing as in a run
    Config& cfg;
    ParamTable& table;
    MemoryPlan& plan;
    Arena& arena;
    Model& model;
    std::vector<ParamSlot> slots;
    std::unique_ptr<OptimizerRunner> runner;

    Trial(const Config& c, const std::string& optimizer)
        : opt(c.find_optimizer(optimizer) ? *c.find_optimizer(optimizer) : builtin_optimizer(optimizer)),
          backend(make_backend(c)), session(open_session(c, *backend, spec_of(opt, c))), cfg(session->cfg),
          table(session->table), plan(session->plan), arena(session->arena), model(session->model) {
        slots = arena_param_slots(opt, table, arena);
        runner = make_optimizer_runner(opt, *backend, arena);
        model_init(model, 1234);
    }

    static SessionSpec spec_of(const OptimizerConfig& o, const Config& c) {
        SessionSpec spec;
        spec.optimizer = &o;
        spec.microbatch = c.train.microbatch;
        return spec;
    }

    struct StepOut {
        double loss = 0, grad_norm = 0;
        size_t idle = 0;
    };

    StepOut step(int64_t t, const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
        const TrainConfig& tc = cfg.train;
        const int64_t mb = tc.microbatch, accum = tc.batch_size / mb, T = tc.seq_len;
        StepOut out;
        ExpertTokenCounts tokens;
        model_zero_grads(model);
        for (int64_t m = 0; m < accum; ++m) {
            LossParts p = model_forward_backward(model, x.data() + m * mb * T, y.data() + m * mb * T, m, uint32_t(t),
                                                 accum, true);
            out.loss += p.total / double(accum);
            add_expert_tokens(tokens, p.moe);
        }
        float grad_scale = 1.0f;
        if (tc.grad_clip > 0 && optimizer_folds_grad_scale(opt)) {
            out.grad_norm = model_grad_norm(model);
            const double coef = tc.grad_clip / (out.grad_norm + 1e-6);
            if (coef < 1.0) grad_scale = float(coef);
        } else {
            out.grad_norm = tc.grad_clip > 0 ? model_clip_gradients(model, tc.grad_clip) : model_grad_norm(model);
        }
        OptimStep os;
        os.t = t;
        os.lr = opt.lr;
        os.seed = uint64_t(tc.seed);
        os.grad_scale = grad_scale;
        const std::vector<IdleExpert> idle = idle_experts(tokens);
        out.idle = idle.size();
        const IdleExpertSnapshot snap =
            tc.idle_experts == IdleExperts::SKIP ? save_idle_experts(*backend, opt, slots, idle) : IdleExpertSnapshot{};
        runner->step(slots, os);
        step_deferred_experts(model, opt, *runner, slots, os);
        restore_idle_experts(*backend, snap);
        backend->synchronize();
        return out;
    }

    /// Plan buffer `name` as host fp32 (bf16 widened) and whether it is bf16.
    std::vector<float> host(const std::string& name, bool* is_bf16) {
        const int i = plan.find(name);
        REQUIRE(i >= 0);
        const BufferSpec& b = plan.buffers[size_t(i)];
        std::vector<float> out(static_cast<size_t>(b.numel()));
        *is_bf16 = b.dtype == DType::BF16;
        if (*is_bf16) {
            std::vector<bf16> h(out.size());
            backend->copy_to_host(h.data(), arena.ptr(i), b.bytes());
            for (size_t k = 0; k < h.size(); ++k) out[k] = bf16_to_f32(h[k]);
        } else {
            backend->copy_to_host(out.data(), arena.ptr(i), b.bytes());
        }
        return out;
    }
};

}  // namespace skew::test
