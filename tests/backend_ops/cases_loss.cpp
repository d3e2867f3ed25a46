// Op-table rows of the losses (tests/backend_ops/op_table.h): cross-entropy forward/backward over a
// padded vocabulary (logits in the hundreds, T = 1, a target out of range), and the fused tied LM head
// (bf16 and fp32 operands, forward only, several chunks on the GPT-2 padded vocabulary); finite
// differences on the CPU.
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/workspace_sizes.h"
#include "kernels/cuda/workspace_sizes.h"
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
                  uint32_t seed, bool with_dwte = true) {
    Case c;
    c.op = "lm_head_cross_entropy";
    c.covers = {"lm_head_cross_entropy"};
    c.shape = label("n%lld C%lld V%lld Vp%lld%s%s%s", (long long)n, (long long)C, (long long)V, (long long)Vp,
                    backward ? "" : " forward only", backward && !with_dwte ? " dwte null" : "",
                    n > 512 ? " (several chunks)" : "");
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
           output_random("dwte", dwdt, backward && with_dwte ? Vp * C : 0, seed + 2, tol_rounded(dwdt, n, 1e-2))};
    if (xdt == DT::BF16 && wdt == DT::BF16) {
        // The CUDA head multiplies bf16-rounded logit gradients into dwte (2^-9 relative per term):
        // NMSE ~ 2^-16 against the CPU's fp32 products (the removed test_cross_entropy.cpp of tests/gpu holds it to 1e-4).
        c.t[6].tol.cross_nmse = 1e-4;
        c.t[6].tol.cross_why = "bf16-rounded logit gradients on CUDA: NMSE ~2^-16";
    }
    c.run = [=](Backend& be, Bufs& b) {
        void* ws = b.scratch(be.lm_head_workspace_bytes(s));
        be.lm_head_cross_entropy(b.at<float>(3), b.at<float>(4), backward ? b.ref(5) : TensorRef(),
                                 backward && with_dwte ? b.ref(6) : TensorRef(), b.ref(0), b.ref(1), b.at<int32_t>(2),
                                 dloss, s, ws);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        double mean = 0.0;
        ref::lm_head_cross_entropy(mean, &t[4].v, backward ? &t[5].v : nullptr,
                                   backward && with_dwte ? &t[6].v : nullptr, t[0].v, t[1].v, t[2].v, dloss, s);
        t[3].v = {mean};
    };
    // The CUDA head takes both operands bf16 or both fp32 (kernels/backend.h).
    c.supports = [xdt, wdt](const BackendTraits& be) { return !be.runs_cuda || xdt == wdt; };
    c.flops = (backward ? 6.0 : 2.0) * double(n) * double(Vp) * double(C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

// A product of the fused head timed alone (perf): the matmul row labelled with its role.
Case head_product(Case c, const char* role) {
    c.shape = std::string(role) + ": " + c.shape;
    return c;
}

// The backward in place (dlogits over the logits, as the unfused head calls it).
Case ce_bwd_in_place_case(int64_t n, int64_t V, int64_t Vp, uint32_t seed) {
    Case c = ce_bwd_case(n, V, Vp, 3, seed);
    c.shape += " in place";
    const Tensor logits = c.t[0];
    c.t[2] = output_values("dlogits", DT::F32, logits.v, c.t[2].tol);  // starts as the logits
    const float dloss = 0.5f;
    c.run = [=](Backend& be, Bufs& b) {
        be.cross_entropy_backward(b.at<float>(2), b.at<float>(2), b.at<int32_t>(1), dloss, n, V, Vp);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        const std::vector<double> lg = t[2].v;
        ref::cross_entropy_backward(t[2].v, lg, t[1].v, dloss, n, V, Vp);
    };
    return c;
}

// fp32 x and wte under a shape that says bf16 operands (whose CUDA workspace layout differs): refused.
Case lm_head_wrong_operands_case() {
    Case c = lm_head_case(9, 24, 60, 64, DT::F32, DT::F32, DT::F32, DT::F32, true, 30);
    c.shape = "f32 operands, shape says bf16: throws on CUDA";
    c.expect_error = true;
    ClassifierShape s{9, 24, 60, 64, true};
    c.run = [s](Backend& be, Bufs& b) {
        ClassifierShape fs = s;
        fs.bf16_operands = false;
        void* ws = b.scratch(std::max(be.lm_head_workspace_bytes(s), be.lm_head_workspace_bytes(fs)));
        be.lm_head_cross_entropy(b.at<float>(3), b.at<float>(4), b.ref(5), b.ref(6), b.ref(0), b.ref(1),
                                 b.at<int32_t>(2), 0.75f, s, ws);
        be.synchronize();
    };
    c.supports = [](const BackendTraits& be) { return be.runs_cuda; };  // the CPU sizes no layout by it
    return c;
}

}  // namespace

void add_loss_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The paper: 64 x 128 tokens, d_model 4096, vocabulary 50,304 (CPU: 1 x 128 tokens).
        const PerfDims d = perf_dims(o);
        const int64_t n = d.batch * d.seq_len, C = d.d_model, V = d.vocab, Vp = d.padded_vocab;
        out.push_back(ce_fwd_case(n, V, Vp, 4, 1));
        out.push_back(ce_bwd_case(n, V, Vp, 4, 2));
        out.push_back(lm_head_case(n, C, V, Vp, DT::BF16, DT::BF16, DT::BF16, DT::F32, true, 3));
        if (d.set == "moe10m") {  // the CPU head's three products on one tile (kernels/cpu/lm_head.cpp)
            const int64_t chunk = cpu::lm_head_chunk_tokens(ClassifierShape{n, C, V, Vp}),
                          tb = cpu_ws::LM_HEAD_BLOCK_COLS;
            const DT f = DT::F32;
            out.push_back(
                head_product(matmul_case(chunk, tb, C, false, true, 1, 0, f, f, f, 4), "CPU head logits tile"));
            out.push_back(head_product(matmul_case(chunk, C, tb, false, false, 1, 0, f, f, f, 5), "CPU head dx tile"));
            out.push_back(head_product(matmul_case(tb, C, chunk, true, false, 1, 0, f, f, f, 6), "CPU head dwte tile"));
        } else if (!d.scaled) {  // the CUDA head's three products (kernels/cuda/workspace_sizes.h lm_head_layout)
            const int64_t chunk = cuda_ws::lm_head_layout(n, C, Vp, true).chunk_tokens;
            const DT b = DT::BF16;
            out.push_back(
                head_product(matmul_case(chunk, Vp, C, false, true, 1, 0, b, b, DT::F32, 7), "CUDA head logits chunk"));
            out.push_back(head_product(matmul_case(n, C, Vp, false, false, 1, 0, b, b, b, 8), "CUDA head dx"));
            out.push_back(head_product(matmul_case(Vp, C, n, true, false, 1, 1, b, b, b, 9), "CUDA head dwte"));
        }
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
    // The CUDA head's cases (the removed test_cross_entropy.cpp of tests/gpu before; docs/backend-ops.md "Old tests").
    out.push_back(ce_fwd_case(67, 1000, 1024, 3, 20));
    out.push_back(ce_bwd_case(67, 1000, 1024, 3, 21));
    out.push_back(ce_bwd_in_place_case(67, 1000, 1024, 22));
    out.push_back(lm_head_wrong_operands_case());
    if (o.large) {
        // CUDA chunks of 640 tokens on the 50,304 vocabulary (kernels/cuda/workspace_sizes.h
        // lm_head_layout): bf16 operands past one chunk with the fp32 dwte accumulator (700 > 640 + 2·4)
        // and keeping every token's dlogits (650 <= 640 + 2·8); fp32 operands in three chunks (dwte
        // fp32) and in two (dwte null; dwte bf16 rounded once from the accumulator).
        const DT b = DT::BF16, f = DT::F32;
        out.push_back(large_row(lm_head_case(700, 4, 50257, 50304, b, b, b, b, true, 24)));
        out.push_back(large_row(lm_head_case(650, 8, 50257, 50304, b, b, b, f, true, 25)));
        out.push_back(large_row(lm_head_case(1300, 4, 50257, 50304, f, f, f, f, true, 27)));
        out.push_back(large_row(lm_head_case(660, 4, 50257, 50304, f, f, f, f, true, 28, false)));
        out.push_back(large_row(lm_head_case(660, 4, 50257, 50304, f, f, f, b, true, 29)));
    }
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
