// The op table's RMSNorm and rotary-position rows (kernels/backend.h "RMSNorm", "rotary position
// embedding"; docs/architectures.md): test shapes with tails off the 64-column reduction block and
// the 32-lane warp, T = 1, head_dim 16/32/64/128, positions offset by pos0 as a KV cache uses
// them, the inverse rotation, an odd head_dim refused; RMSNorm at the q and k norm shapes
// (model.qk_norm: one head's head_dim lanes per row, or a whole projection's); the paper-width
// perf shapes; and their finite-difference cases.
#include <cmath>
#include <cstdio>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/reference.h"

namespace skew::ops {

namespace {

// ---- rmsnorm

Case rmsnorm_fwd_case(int64_t N, int64_t C, uint32_t seed) {
    Case c;
    c.op = "rmsnorm_forward";
    c.shape = label("N%lld C%lld", (long long)N, (long long)C);
    c.dtypes = "bf16 (f32 weight)";
    c.t.push_back(input("x", DT::BF16, N * C, seed, -1.0, 5.0));  // a mean ~2: no centring
    c.t.push_back(input("weight", DT::F32, C, seed + 1, 0.5, 1.5));
    c.t.push_back(output("out", DT::BF16, N * C, tol_rounded(DT::BF16, C)));
    c.t.push_back(output("rstd", DT::F32, N, tol_rounded(DT::F32, C)));
    c.run = [=](Backend& be, Bufs& b) {
        be.rmsnorm_forward(b.at<bf16>(2), b.at<float>(3), b.at<bf16>(0), b.at<float>(1), N, C, 1e-6f);
    };
    c.ref = [=](std::vector<Tensor>& t) { ref::rmsnorm_forward(t[2].v, &t[3].v, t[0].v, t[1].v, N, C, double(1e-6f)); };
    c.flops = 4.0 * double(N * C);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case rmsnorm_bwd_case(int64_t N, int64_t C, bool accumulate, uint32_t seed) {
    Case c;
    c.op = "rmsnorm_backward";
    c.shape = label("N%lld C%lld%s", (long long)N, (long long)C, accumulate ? " accumulate dinp" : "");
    c.dtypes = "bf16 (f32 weight)";
    Tensor x = input("x", DT::BF16, N * C, seed, -1.0, 5.0);
    std::vector<double> out(static_cast<size_t>(N * C)), w1(static_cast<size_t>(C), 1.0), rstd(static_cast<size_t>(N));
    if (x.lazy == 0) ref::rmsnorm_forward(out, &rstd, x.v, w1, N, C, double(1e-6f));
    else std::fill(rstd.begin(), rstd.end(), 1.0);  // a perf shape's x has no host values
    c.t.push_back(std::move(x));
    c.t.push_back(input("dout", DT::BF16, N * C, seed + 1));
    c.t.push_back(input("weight", DT::F32, C, seed + 2, 0.5, 1.5));
    c.t.push_back(input_values("rstd", DT::F32, rstd));  // what the forward saves (fp32)
    c.t.push_back(accumulate ? output_random("dinp", DT::BF16, N * C, seed + 3, tol_rounded(DT::BF16, C))
                             : output("dinp", DT::BF16, N * C, tol_rounded(DT::BF16, C)));
    c.t.push_back(output_random("dweight", DT::F32, C, seed + 4, tol_rounded(DT::F32, std::max(N, C))));
    c.run = [=](Backend& be, Bufs& b) {
        be.rmsnorm_backward(b.at<bf16>(4), b.at<float>(5), b.at<bf16>(1), b.at<bf16>(0), b.at<float>(2), b.at<float>(3),
                            N, C, accumulate);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::rmsnorm_backward(t[4].v, &t[5].v, t[1].v, t[0].v, t[2].v, t[3].v, N, C, accumulate);
    };
    c.flops = 9.0 * double(N * C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

// ---- rope (in place: the tensor's initial values are the input)

Case rope_case(int64_t B, int64_t T, int64_t H, int64_t d, int64_t pos0, float theta, bool inverse, uint32_t seed) {
    Case c;
    c.op = "rope";
    c.shape = label("B%lld T%lld H%lld d%lld pos0 %lld theta %g%s", (long long)B, (long long)T, (long long)H,
                    (long long)d, (long long)pos0, double(theta), inverse ? " inverse" : "");
    c.dtypes = "bf16";
    // one rounding to bf16 of an fp32 rotation: each output is a 2-term sum; the fp32 angle
    // (pos·inv_freq, up to ~10^2 rad here) is off by ~2^-24 relative, far below u_bf16
    c.t.push_back(output_random("x", DT::BF16, B * T * H * d, seed, tol_rounded(DT::BF16, 2)));
    c.run = [=](Backend& be, Bufs& b) { be.rope(b.at<bf16>(0), B, T, H, d, pos0, theta, inverse); };
    c.ref = [=](std::vector<Tensor>& t) { ref::rope(t[0].v, B, T, H, d, pos0, double(theta), inverse); };
    c.flops = 6.0 * double(B * T * H * d / 2);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

// The large row: more lane pairs than grid_for's capped grid has threads (2^28 + 2^14 pairs at 256
// threads a block, 1 GiB of bf16 in backend scratch), positions 0..63 (small angles, so the fp32
// angle stays exact to bf16). The tensor compared is the last batch element, copied into the scratch
// before the rotation and out after it: every one of its pairs lies past pair 2^28.
Case rope_large_case(uint32_t seed) {
    const int64_t B = (int64_t(1) << 14) + 1, T = 64, H = 4, d = 128, one = T * H * d;
    Case c = rope_case(1, T, H, d, 0, 1e4f, false, seed);
    c.shape = label("B%lld T%lld H%lld d%lld: 2^28 + 2^14 pairs, the last batch element compared", (long long)B,
                    (long long)T, (long long)H, (long long)d);
    c.t[0].name = "x_last";
    c.run = [=](Backend& be, Bufs& b) {
        bf16* x = static_cast<bf16*>(b.scratch(B * one * int64_t(sizeof(bf16))));
        bf16* last = x + (B - 1) * one;
        be.convert(last, ConstTensorRef(b.at<bf16>(0)), one);
        be.rope(x, B, T, H, d, 0, 1e4f, false);
        be.convert(b.at<bf16>(0), ConstTensorRef(last), one);
    };
    c.flops = 6.0 * double(B * T * H * d / 2);
    c.bytes = 2.0 * double(B * one) * double(sizeof(bf16));
    return c;
}

Case rope_bad_case() {
    Case c;
    c.op = "rope";
    c.shape = "head_dim 5 (odd): throws";
    c.dtypes = "bf16";
    c.expect_error = true;
    c.t = {output("x", DT::BF16, 15, Tol{})};
    c.run = [](Backend& be, Bufs& b) { be.rope(b.at<bf16>(0), 1, 1, 3, 5, 0, 1e4f); };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

}  // namespace

void add_norm_rope_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The paper: 64 x 128 tokens, d_model 4096, 32 query heads of 128 (CPU: 1 x 128 tokens).
        const PerfDims d = perf_dims(o);
        const int64_t B = d.batch, T = d.seq_len, N = B * T, C = d.d_model;
        out.push_back(rmsnorm_fwd_case(N, C, 1));
        out.push_back(rmsnorm_bwd_case(N, C, true, 2));
        out.push_back(rope_case(B, T, d.n_heads, d.head_dim, 0, 1e6f, false, 3));
        out.push_back(rmsnorm_fwd_case(N * d.n_heads, d.head_dim, 4));  // Qwen3's per-head q norm (heads of head_dim)
        out.push_back(rmsnorm_bwd_case(N * d.n_heads, d.head_dim, false, 5));
        return;
    }
    out.push_back(rmsnorm_fwd_case(5, 67, 10));
    out.push_back(rmsnorm_fwd_case(1, 256, 11));  // T = 1
    out.push_back(rmsnorm_bwd_case(5, 67, false, 12));
    out.push_back(rmsnorm_bwd_case(16, 64, true, 13));
    out.push_back(rmsnorm_bwd_case(1, 256, false, 14));
    // q and k normalization (model.qk_norm): per_head rows of one head (head_dim 16..128, one warp
    // per row on CUDA, a half-idle warp at 16), full rows of a whole projection (OLMoE's widths)
    uint32_t qk_seed = 50;
    for (int64_t d : {16, 32, 64, 128}) {
        out.push_back(rmsnorm_fwd_case(2 * 9 * 4, d, qk_seed += 3));  // B 2, T 9, 4 heads
        out.push_back(rmsnorm_bwd_case(2 * 9 * 4, d, false, qk_seed += 3));
    }
    out.push_back(rmsnorm_bwd_case(300, 64, false, 70));  // rows across two 256-row partial chunks
    out.push_back(rmsnorm_fwd_case(7, 2048, 71));         // full: q of 16 heads of 128
    out.push_back(rmsnorm_bwd_case(7, 2048, false, 72));
    uint32_t seed = 20;
    for (int64_t d : {16, 32, 64, 128}) out.push_back(rope_case(2, 70, 3, d, 0, 1e4f, false, seed += 3));
    out.push_back(rope_case(1, 9, 4, 128, 37, 1e6f, false, 40));  // a KV cache's positions
    out.push_back(rope_case(2, 70, 3, 64, 5, 1e4f, true, 41));    // the backward
    out.push_back(rope_case(1, 1, 8, 32, 0, 1e4f, false, 42));    // T = 1 at position 0: unchanged
    out.push_back(rope_bad_case());
    if (o.large) {
        out.push_back(large_row(rope_large_case(43)));
        // 2^24 rows: 65,536 row chunks of the weight gradient's partial sums, one more than a grid's y
        // dimension holds (the chunks loop over grid.y)
        out.push_back(large_row(rmsnorm_bwd_case(int64_t(1) << 24, 1, false, 73)));
    }
}

void add_norm_rope_grad_cases(std::vector<GradCase>& out) {
    {  // rmsnorm
        struct S {
            int64_t N = 3, C = 8;
            std::vector<float> x = uniform_f32(24, 2), w = uniform_f32(8, 3, 0.5, 1.5), r = uniform_f32(24, 5);
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "rmsnorm_backward";
        g.shape = "N3 C8";
        const std::string why = "fp32 forward, eps 1e-3: truncation ~1e-6, rounding ~1e-4 absolute";
        g.in = {{"inp", &s->x, 1e-3f, 5e-4, 1e-2, why}, {"weight", &s->w, 1e-3f, 5e-4, 1e-2, why}};
        g.loss = [s] {
            std::vector<float> o(s->x.size());
            cpu::rmsnorm_forward(o.data(), (float*)nullptr, s->x.data(), s->w.data(), s->N, s->C, 1e-5f);
            return dot_f32(o, s->r);
        };
        g.analytic = [s] {
            std::vector<float> o(s->x.size()), rstd(static_cast<size_t>(s->N)), dx(s->x.size()), dw(s->w.size(), 0.0f);
            cpu::rmsnorm_forward(o.data(), rstd.data(), s->x.data(), s->w.data(), s->N, s->C, 1e-5f);
            cpu::rmsnorm_backward(dx.data(), dw.data(), s->r.data(), s->x.data(), s->w.data(), rstd.data(), s->N, s->C,
                                  false);
            return std::vector<std::vector<float>>{dx, dw};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
    {  // rope: the inverse rotation of the output gradient is the input gradient
        struct S {
            int64_t B = 1, T = 9, H = 2, d = 16;
            std::vector<float> x = uniform_f32(288, 6), r = uniform_f32(288, 7);
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "rope";
        g.shape = "B1 T9 H2 d16, inverse as the backward";
        const std::string why = "linear op: fd exact up to the loss's fp32 rounding (~1e-7 / eps)";
        g.in = {{"x", &s->x, 1e-2f, 1e-4, 1e-3, why}};
        g.loss = [s] {
            std::vector<float> y = s->x;
            cpu::rope(y.data(), s->B, s->T, s->H, s->d, 0, 1e4f, false);
            return dot_f32(y, s->r);
        };
        g.analytic = [s] {
            std::vector<float> dx = s->r;
            cpu::rope(dx.data(), s->B, s->T, s->H, s->d, 0, 1e4f, true);
            return std::vector<std::vector<float>>{dx};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
}

}  // namespace skew::ops
