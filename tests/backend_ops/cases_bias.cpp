// The op table's bias rows (kernels/backend.h "bias of a linear layer"; model.attention_bias,
// docs/architectures.md): the in-place bias add at widths off the 256-column block and the 32-column
// partials, the bias gradient over row counts across the CUDA kernel's 256-row chunks (run twice:
// deterministic), T = 1; the perf shapes at Qwen3-30B-A3B's q width; and the finite-difference case.
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

namespace {

Case bias_fwd_case(int64_t N, int64_t C, uint32_t seed) {
    Case c;
    c.op = "bias_add_forward";
    c.shape = label("N%lld C%lld", (long long)N, (long long)C);
    c.dtypes = "bf16 (f32 bias)";
    c.t.push_back(input("bias", DT::F32, C, seed, -2.0, 2.0));
    // in place: out's initial values are the projection's output; one fp32 add and one rounding,
    // which the reference reproduces exactly
    c.t.push_back(output_random("out", DT::BF16, N * C, seed + 1,
                                Tol{0, 0, "the fp32 add and one rounding to nearest even, reproduced exactly"}));
    c.run = [=](Backend& be, Bufs& b) { be.bias_add_forward(b.at<bf16>(1), b.at<float>(0), N, C); };
    c.ref = [=](std::vector<Tensor>& t) {
        if (t[1].v.empty()) return;  // a perf shape keeps no host values
        for (int64_t r = 0; r < N; ++r)
            for (int64_t k = 0; k < C; ++k) {
                double& o = t[1].v[size_t(r * C + k)];
                o = round_to(DT::BF16, float(o) + float(t[0].v[size_t(k)]));
            }
    };
    c.flops = double(N * C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

Case bias_bwd_case(int64_t N, int64_t C, uint32_t seed) {
    Case c;
    c.op = "bias_add_backward";
    c.shape = label("N%lld C%lld", (long long)N, (long long)C);
    c.dtypes = "bf16 -> f32";
    c.t.push_back(input("dout", DT::BF16, N * C, seed));
    // accumulated into its previous contents; an fp32 sum of N mixed-sign terms per column
    c.t.push_back(output_random("dbias", DT::F32, C, seed + 1, tol_rounded(DT::F32, N)));
    c.run = [=](Backend& be, Bufs& b) { be.bias_add_backward(b.at<float>(1), b.at<bf16>(0), N, C); };
    c.ref = [=](std::vector<Tensor>& t) {
        if (t[0].v.empty()) return;
        for (int64_t r = 0; r < N; ++r)
            for (int64_t k = 0; k < C; ++k) t[1].v[size_t(k)] += t[0].v[size_t(r * C + k)];
    };
    c.deterministic = true;  // documented: an order fixed by the shape
    c.flops = double(N * C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

}  // namespace

void add_bias_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // Qwen3-30B-A3B's q projection: 32 heads of 128 = 4096 lanes, 64 x 128 tokens (CPU: 1 x 128)
        const int64_t N = (o.cpu_scaled ? 1 : 64) * 128, C = 4096;
        out.push_back(bias_fwd_case(N, C, 1));
        out.push_back(bias_bwd_case(N, C, 2));
        return;
    }
    out.push_back(bias_fwd_case(5, 67, 10));
    out.push_back(bias_fwd_case(1, 256, 11));   // T = 1
    out.push_back(bias_fwd_case(40, 300, 12));  // a column tail past a 256-column block
    out.push_back(bias_bwd_case(5, 67, 13));
    out.push_back(bias_bwd_case(1, 128, 14));
    out.push_back(bias_bwd_case(600, 40, 15));  // three 256-row chunks, the last partial
    if (o.large)  // 2^24 rows: 65,536 row chunks of partial sums, one more than a grid's y dimension holds
        out.push_back(large_row(bias_bwd_case(int64_t(1) << 24, 1, 16)));
}

void add_bias_grad_cases(std::vector<GradCase>& out) {
    struct S {
        int64_t N = 4, C = 6;
        std::vector<float> b = uniform_f32(6, 8), x = uniform_f32(24, 9), r = uniform_f32(24, 10);
    };
    auto s = std::make_shared<S>();
    GradCase g;
    g.op = "bias_add_backward";
    g.shape = "N4 C6";
    const std::string why = "linear op: fd exact up to the loss's fp32 rounding (~1e-7 / eps)";
    g.in = {{"bias", &s->b, 1e-2f, 1e-4, 1e-3, why}};
    g.loss = [s] {
        std::vector<float> y = s->x;
        cpu::bias_add_forward(y.data(), s->b.data(), s->N, s->C);
        return dot_f32(y, s->r);
    };
    g.analytic = [s] {
        std::vector<float> db(s->b.size(), 0.0f);
        cpu::bias_add_backward(db.data(), s->r.data(), s->N, s->C);
        return std::vector<std::vector<float>>{db};
    };
    g.state = s;
    out.push_back(std::move(g));
}

}  // namespace skew::ops
