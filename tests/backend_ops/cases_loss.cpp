// Op-table rows of the losses (tests/backend_ops/op_table.h): cross-entropy forward/backward over a
// padded vocabulary (logits in the hundreds, T = 1, a target out of range), and the fused tied LM head
// (bf16 and fp32 operands, forward only, several chunks on the GPT-2 padded vocabulary); finite
// differences on the CPU.
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/reference.h"

namespace skew::ops {

namespace {

std::vector<double> targets_of(int64_t n, int64_t V, uint32_t seed) {
    std::vector<double> t(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& v : t) x = x * 1664525u + 1013904223u, v = double((x >> 8) % uint32_t(V));
    if (n > 1) t[0] = double(V - 1);  // the last real column
    return t;
}

Case ce_fwd_case(int64_t n, int64_t V, int64_t Vp, double scale, uint32_t seed) {
    Case c;
    c.op = "cross_entropy_forward";
    c.shape = label("n%lld V%lld Vp%lld logits in ±%g", (long long)n, (long long)V, (long long)Vp, scale);
    c.dtypes = "f32";
    // The loss lse - logit: f32 after a length-V sum; its scale grows with the logits, hence atol·scale.
    c.t = {input("logits", DT::F32, n * Vp, seed, -scale, scale),
           input_values("targets", DT::I32, targets_of(n, V, seed)),
           output("losses", DT::F32, n, tol_rounded(DT::F32, V, scale))};
    c.run = [=](Backend& be, Bufs& b) {
        be.cross_entropy_forward(b.at<float>(2), b.at<float>(0), b.at<int32_t>(1), n, V, Vp);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::cross_entropy_forward(t[2].v, t[0].v, t[1].v, n, V, Vp); };
    c.flops = 3.0 * double(n * V);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case ce_bwd_case(int64_t n, int64_t V, int64_t Vp, double scale, uint32_t seed) {
    Case c;
    c.op = "cross_entropy_backward";
    c.shape = label("n%lld V%lld Vp%lld logits in ±%g", (long long)n, (long long)V, (long long)Vp, scale);
    c.dtypes = "f32";
    const float dloss = 0.5f;
    // softmax entries in [0, 1] scaled by dloss/n; absolute floor for the many near-zero probabilities.
    c.t = {input("logits", DT::F32, n * Vp, seed, -scale, scale),
           input_values("targets", DT::I32, targets_of(n, V, seed)),
           output_random("dlogits", DT::F32, n * Vp, seed + 1, tol_rounded(DT::F32, V, 1e-3 / double(n)))};
    c.run = [=](Backend& be, Bufs& b) {
        be.cross_entropy_backward(b.at<float>(2), b.at<float>(0), b.at<int32_t>(1), dloss, n, V, Vp);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::cross_entropy_backward(t[2].v, t[0].v, t[1].v, dloss, n, V, Vp); };
    c.flops = 4.0 * double(n * V);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case ce_bad_target_case() {
    Case c;
    c.op = "cross_entropy_forward";
    c.shape = "target V (out of range): throws";
    c.dtypes = "f32";
    c.expect_error = true;
    c.t = {input("logits", DT::F32, 2 * 8, 1), input_values("targets", DT::I32, {1, 6}),
           output("losses", DT::F32, 2, Tol{})};
    c.run = [](Backend& be, Bufs& b) {
        be.cross_entropy_forward(b.at<float>(2), b.at<float>(0), b.at<int32_t>(1), 2, 6, 8);
        be.synchronize();  // a device backend reports kernel-found errors here
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

Case lm_head_case(int64_t n, int64_t C, int64_t V, int64_t Vp, DT xdt, DT wdt, DT dxdt, DT dwdt, bool backward,
                  uint32_t seed) {
    Case c;
    c.op = "lm_head_cross_entropy";
    c.covers = {"lm_head_cross_entropy"};
    c.shape = label("n%lld C%lld V%lld Vp%lld%s%s", (long long)n, (long long)C, (long long)V, (long long)Vp,
                    backward ? "" : " forward only", n > 512 ? " (several chunks)" : "");
    c.dtypes = std::string(dt_name(xdt)) + "·" + dt_name(wdt) +
               (backward ? std::string("->") + dt_name(dxdt) + "," + dt_name(dwdt) : "");
    const ClassifierShape s{n, C, V, Vp, xdt == DT::BF16};
    const float dloss = 0.75f;
    c.t = {input("x", xdt, n * C, seed),
           input("wte", wdt, Vp * C, seed + 1),
           input_values("targets", DT::I32, targets_of(n, V, seed)),
           output("mean_loss", DT::F32, 1, tol_rounded(DT::F32, C * V)),
           output("losses", DT::F32, n, tol_rounded(DT::F32, C * V)),
           output("dx", dxdt, backward ? n * C : 0, tol_rounded(dxdt, Vp, 1e-2)),
           output_random("dwte", dwdt, backward ? Vp * C : 0, seed + 2, tol_rounded(dwdt, n, 1e-2))};
    if (xdt == DT::BF16 && wdt == DT::BF16) {
        // The CUDA head multiplies bf16-rounded logit gradients into dwte (2^-9 relative per term):
        // NMSE ~ 2^-16 against the CPU's fp32 products (tests/gpu/test_cross_entropy.cpp holds it to 1e-4).
        c.t[6].tol.cross_nmse = 1e-4;
        c.t[6].tol.cross_why = "bf16-rounded logit gradients on CUDA: NMSE ~2^-16";
    }
    c.run = [=](Backend& be, Bufs& b) {
        void* ws = b.scratch(be.lm_head_workspace_bytes(s));
        be.lm_head_cross_entropy(b.at<float>(3), b.at<float>(4), backward ? b.ref(5) : TensorRef(),
                                 backward ? b.ref(6) : TensorRef(), b.ref(0), b.ref(1), b.at<int32_t>(2), dloss, s, ws);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        double mean = 0.0;
        ref::lm_head_cross_entropy(mean, &t[4].v, backward ? &t[5].v : nullptr, backward ? &t[6].v : nullptr, t[0].v,
                                   t[1].v, t[2].v, dloss, s);
        t[3].v = {mean};
    };
    // The CUDA head takes both operands bf16 or both fp32 (kernels/backend.h).
    c.supports = [xdt, wdt](const BackendTraits& be) { return !be.runs_cuda || xdt == wdt; };
    c.flops = (backward ? 6.0 : 2.0) * double(n) * double(Vp) * double(C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

}  // namespace

void add_loss_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The paper: 64 x 128 tokens, d_model 4096, vocabulary 50,304 (CPU: 1 x 128 tokens).
        const int64_t n = o.cpu_scaled ? 128 : 8192, C = 4096, V = 50304;
        out.push_back(ce_fwd_case(n, V, V, 4, 1));
        out.push_back(ce_bwd_case(n, V, V, 4, 2));
        out.push_back(lm_head_case(n, C, V, V, DT::BF16, DT::BF16, DT::BF16, DT::F32, true, 3));
        return;
    }
    out.push_back(ce_fwd_case(7, 50, 64, 2, 1));
    out.push_back(ce_fwd_case(1, 1000, 1024, 4, 2));  // T = 1
    out.push_back(ce_fwd_case(4, 37, 40, 300, 3));    // logits in the hundreds
    out.push_back(ce_bwd_case(7, 50, 64, 2, 4));
    out.push_back(ce_bwd_case(4, 37, 40, 300, 5));
    out.push_back(ce_bwd_case(1, 1000, 1024, 4, 6));
    out.push_back(ce_bad_target_case());
    out.push_back(lm_head_case(13, 40, 100, 128, DT::BF16, DT::BF16, DT::BF16, DT::F32, true, 10));
    out.push_back(lm_head_case(13, 40, 100, 128, DT::BF16, DT::BF16, DT::BF16, DT::BF16, true, 11));
    out.push_back(lm_head_case(9, 24, 60, 64, DT::F32, DT::F32, DT::F32, DT::F32, true, 12));
    out.push_back(lm_head_case(9, 24, 60, 64, DT::BF16, DT::F32, DT::F32, DT::F32, true, 13));
    out.push_back(lm_head_case(1, 64, 70, 80, DT::BF16, DT::BF16, DT::BF16, DT::F32, false, 14));
    out.push_back(lm_head_case(520, 4, 50257, 50304, DT::BF16, DT::BF16, DT::BF16, DT::F32, true, 15));
}

namespace {}  // namespace

void add_loss_grad_cases(std::vector<GradCase>& out) {
    {  // cross-entropy: mean loss times dloss
        struct S {
            int64_t n = 4, V = 7, Vp = 8;
            std::vector<float> logits = uniform_f32(32, 1, -3, 3);
            std::vector<int32_t> targets{0, 6, 3, 3};
        };
        auto st = std::make_shared<S>();
        GradCase g;
        g.op = "cross_entropy_backward";
        g.shape = "n4 V7 Vp8, loss 0.5 mean";
        g.in = {{"logits", &st->logits, 1e-3f, 5e-5, 1e-2, "fp32 softmax, eps 1e-3: rounding ~1e-5"}};
        g.loss = [st] {
            std::vector<float> l(size_t(st->n));
            cpu::cross_entropy_forward(l.data(), st->logits.data(), st->targets.data(), st->n, st->V, st->Vp);
            double s = 0.0;
            for (float x : l) s += x;
            return 0.5 * s / double(st->n);
        };
        g.analytic = [st] {
            std::vector<float> d(st->logits.size());
            cpu::cross_entropy_backward_scaled(d.data(), st->logits.data(), st->targets.data(), 0.5f / float(st->n),
                                               st->n, st->V, st->Vp);
            return std::vector<std::vector<float>>{d};
        };
        g.state = st;
        out.push_back(std::move(g));
    }
    {  // the fused head: dx and dwte of dloss · mean loss
        struct S {
            ClassifierShape s{5, 4, 6, 8, false};
            std::vector<float> x = uniform_f32(20, 2), wte = uniform_f32(32, 3);
            std::vector<int32_t> targets{1, 5, 0, 2, 2};
            std::vector<unsigned char> ws;
        };
        auto st = std::make_shared<S>();
        st->ws.resize(size_t(cpu::lm_head_workspace_bytes(st->s)) + 64);
        GradCase g;
        g.op = "lm_head_cross_entropy";
        g.shape = "n5 C4 V6 Vp8 fp32, loss 0.75 mean";
        const std::string why = "the mean loss (~2) rounded to fp32 (1.2e-7) over a 2e-3 step: ~6e-5 per quotient";
        g.in = {{"x", &st->x, 1e-3f, 3e-4, 1e-2, why}, {"wte", &st->wte, 1e-3f, 3e-4, 1e-2, why}};
        auto ws = [st] { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(st->ws.data()) + 63) / 64 * 64); };
        g.loss = [st, ws] {
            float mean = 0.0f;
            cpu::lm_head_cross_entropy(&mean, nullptr, TensorRef(), TensorRef(), ConstTensorRef(st->x.data()),
                                       ConstTensorRef(st->wte.data()), st->targets.data(), 0.75f, st->s, ws());
            return 0.75 * double(mean);
        };
        g.analytic = [st, ws] {
            float mean = 0.0f;
            std::vector<float> dx(st->x.size()), dw(st->wte.size(), 0.0f);
            cpu::lm_head_cross_entropy(&mean, nullptr, TensorRef(dx.data()), TensorRef(dw.data()),
                                       ConstTensorRef(st->x.data()), ConstTensorRef(st->wte.data()), st->targets.data(),
                                       0.75f, st->s, ws());
            return std::vector<std::vector<float>>{dx, dw};
        };
        g.state = st;
        out.push_back(std::move(g));
    }
}

}  // namespace skew::ops
