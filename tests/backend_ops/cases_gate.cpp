// Op-table rows of the sigmoid gate (the shared experts' gate, Qwen2-MoE; docs/architectures.md
// "Shared experts"): forward written and accumulated, backward with either output skipped, at the
// test shapes (tails off a warp, one row) and the paper's d_model (perf); the gate's one-column
// matmul rows (its logit and both gradients); the finite-difference check of its backward on the
// CPU's fp32 instantiation.
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

namespace {

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

Case gate_fwd_case(int64_t n, int64_t C, bool accumulate, uint32_t seed) {
    Case c;
    c.op = "sigmoid_gate_forward";
    c.shape = label("n%lld C%lld%s", (long long)n, (long long)C, accumulate ? " accumulate" : "");
    c.dtypes = "f32·bf16->bf16";
    c.t.push_back(input("logit", DT::F32, n, seed, -6.0, 6.0));
    c.t.push_back(input("s", DT::BF16, n * C, seed + 1, -2.0, 2.0));
    // a product and (accumulate) one sum in fp32, rounded to bf16 once
    c.t.push_back(accumulate ? output_random("out", DT::BF16, n * C, seed + 2, tol_rounded(DT::BF16, 2))
                             : output("out", DT::BF16, n * C, tol_rounded(DT::BF16, 1)));
    c.run = [=](Backend& be, Bufs& b) {
        be.sigmoid_gate_forward(b.at<bf16>(2), b.at<float>(0), b.at<bf16>(1), n, C, accumulate);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        for (int64_t r = 0; r < n; ++r)
            for (int64_t j = 0; j < C; ++j) {
                double& o = t[2].v[size_t(r * C + j)];
                o = (accumulate ? o : 0.0) + sigmoid_d(t[0].v[size_t(r)]) * t[1].v[size_t(r * C + j)];
            }
    };
    c.flops = (accumulate ? 2.0 : 1.0) * double(n * C);
    c.bytes = tensor_bytes(c.t, accumulate);
    c.deterministic = true;
    return c;
}

// outputs: 0 both, 1 ds only, 2 dlogit only
Case gate_bwd_case(int64_t n, int64_t C, int outputs, uint32_t seed) {
    Case c;
    c.op = "sigmoid_gate_backward";
    c.shape = label("n%lld C%lld%s", (long long)n, (long long)C,
                    outputs == 1   ? " dlogit null"
                    : outputs == 2 ? " ds null"
                                   : "");
    c.dtypes = "bf16·f32->bf16, f32";
    c.t.push_back(input("dout", DT::BF16, n * C, seed));
    c.t.push_back(input("logit", DT::F32, n, seed + 1, -6.0, 6.0));
    c.t.push_back(input("s", DT::BF16, n * C, seed + 2, -2.0, 2.0));
    const bool want_ds = outputs != 2, want_dlogit = outputs != 1;
    // ds: one product rounded once; dlogit: a sum of C mixed-sign products in fp32
    c.t.push_back(want_ds
                      ? output("ds", DT::BF16, n * C, tol_rounded(DT::BF16, 1))
                      : output_values("ds", DT::BF16, std::vector<double>(size_t(n * C), 3.0), Tol{0, 0, "skipped"}));
    c.t.push_back(want_dlogit
                      ? output("dlogit", DT::F32, n, tol_rounded(DT::F32, C))
                      : output_values("dlogit", DT::F32, std::vector<double>(size_t(n), 5.0), Tol{0, 0, "skipped"}));
    c.run = [=](Backend& be, Bufs& b) {
        be.sigmoid_gate_backward(want_ds ? b.at<bf16>(3) : nullptr, want_dlogit ? b.at<float>(4) : nullptr,
                                 b.at<bf16>(0), b.at<float>(1), b.at<bf16>(2), n, C);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        for (int64_t r = 0; r < n; ++r) {
            const double g = sigmoid_d(t[1].v[size_t(r)]);
            double dot = 0.0;
            for (int64_t j = 0; j < C; ++j) {
                const size_t i = size_t(r * C + j);
                if (want_ds) t[3].v[i] = g * t[0].v[i];
                dot += t[0].v[i] * t[2].v[i];
            }
            if (want_dlogit) t[4].v[size_t(r)] = g * (1.0 - g) * dot;
        }
    };
    c.flops = 3.0 * double(n * C);
    c.bytes = tensor_bytes(c.t);
    c.deterministic = true;
    return c;
}

// The gate's three one-column products (model/model.cpp, the shared experts' gate; cuBLASLt on
// CUDA): logit (N, 1) f32 = x (N, C) bf16 · w_gate (1, C)^T; dx (N, C) bf16 += dlogit (N, 1) f32 ·
// w_gate (a k = 1 product accumulating into the LN output's gradient); dw_gate (1, C) += dlogit^T ·
// x, in fp32 or bf16 (runtime.grad_dtype). Shapes labelled as the gate's.
void add_gate_products(std::vector<Case>& out, int64_t N, int64_t C, uint32_t seed) {
    auto gate = [](Case c, const char* what) {
        c.shape += std::string(" (shared-expert gate ") + what + ")";
        return c;
    };
    out.push_back(gate(matmul_case(N, 1, C, false, true, 1, 0, DT::BF16, DT::BF16, DT::F32, seed), "logit"));
    out.push_back(gate(matmul_case(N, C, 1, false, false, 1, 1, DT::F32, DT::BF16, DT::BF16, seed + 3), "dx"));
    out.push_back(gate(matmul_case(1, C, N, true, false, 1, 1, DT::F32, DT::BF16, DT::F32, seed + 6), "dw_gate f32"));
    out.push_back(gate(matmul_case(1, C, N, true, false, 1, 1, DT::F32, DT::BF16, DT::BF16, seed + 9), "dw_gate bf16"));
}

}  // namespace

void add_gate_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The paper's tokens and d_model (CPU: 1 x 128 tokens): one shared-expert gate of a block.
        const int64_t n = o.cpu_scaled ? 128 : 8192, C = 4096;
        out.push_back(gate_fwd_case(n, C, true, 1));
        out.push_back(gate_bwd_case(n, C, 0, 2));
        add_gate_products(out, n, C, 3);
        return;
    }
    out.push_back(gate_fwd_case(37, 67, false, 10));
    out.push_back(gate_fwd_case(37, 67, true, 11));
    out.push_back(gate_fwd_case(1, 256, true, 12));  // T = 1
    out.push_back(gate_bwd_case(37, 67, 0, 20));
    out.push_back(gate_bwd_case(9, 1000, 0, 21));
    out.push_back(gate_bwd_case(1, 33, 1, 22));
    out.push_back(gate_bwd_case(5, 40, 2, 23));
    add_gate_products(out, 37, 67, 30);  // odd widths: no 16-byte alignment of the rows
    add_gate_products(out, 1, 256, 40);  // T = 1
    add_gate_products(out, 300, 2048, 50);
}

void add_gate_grad_cases(std::vector<GradCase>& out) {
    struct S {
        int64_t n = 4, C = 6;
        std::vector<float> logit = uniform_f32(4, 30, -3, 3), s = uniform_f32(24, 31, -2, 2), r = uniform_f32(24, 32);
    };
    auto s = std::make_shared<S>();
    GradCase g;
    g.op = "sigmoid_gate_backward";
    g.shape = "n4 C6, logit in [-3, 3)";
    const std::string why = "smooth in both inputs, eps 1e-3: truncation ~1e-7, rounding ~1e-4";
    g.in = {{"logit", &s->logit, 1e-3f, 2e-4, 1e-3, why}, {"s", &s->s, 1e-3f, 2e-4, 1e-3, why}};
    g.loss = [s] {
        std::vector<float> o(s->s.size());
        cpu::sigmoid_gate_forward(o.data(), s->logit.data(), s->s.data(), s->n, s->C, false);
        return dot_f32(o, s->r);
    };
    g.analytic = [s] {
        std::vector<float> dlogit(s->logit.size()), ds(s->s.size());
        cpu::sigmoid_gate_backward(ds.data(), dlogit.data(), s->r.data(), s->logit.data(), s->s.data(), s->n, s->C);
        return std::vector<std::vector<float>>{dlogit, ds};
    };
    g.state = s;
    out.push_back(std::move(g));
}

}  // namespace skew::ops
