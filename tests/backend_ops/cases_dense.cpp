// Op-table rows of the dense ops (tests/backend_ops/op_table.h): matmul, embedding, LayerNorm and
// SwiGLU, forward and backward, at the test shapes (tails off the tile, T = 1, mixed dtypes) and the
// paper's (perf); their finite-difference checks on the CPU's fp32 instantiations.
#include <algorithm>
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/reference.h"

namespace skew::ops {

// ---- matmul

Case matmul_case(int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta, DT da, DT db, DT dc,
                 uint32_t seed) {
    Case c;
    c.op = "matmul";
    c.shape = label("m%lld n%lld k%lld %s%s alpha %g beta %g", (long long)m, (long long)n, (long long)k, ta ? "T" : "N",
                    tb ? "T" : "N", alpha, beta);
    c.dtypes = std::string(dt_name(da)) + "·" + dt_name(db) + "->" + dt_name(dc);
    c.t.push_back(input("a", da, m * k, seed));
    c.t.push_back(input("b", db, k * n, seed + 1));
    c.t.push_back(beta != 0.0f ? output_random("c", dc, m * n, seed + 2, tol_rounded(dc, k))
                               : output("c", dc, m * n, tol_rounded(dc, k)));
    const MatmulShape s{m, n, k, ta, tb, alpha, beta};
    c.run = [s](Backend& be, Bufs& b) { be.matmul(b.ref(2), b.ref(0), b.ref(1), s); };
    c.ref = [s](std::vector<Tensor>& t) { ref::matmul(t[2].v, t[0].v, t[1].v, s); };
    c.flops = 2.0 * double(m) * double(n) * double(k);
    c.bytes = tensor_bytes(c.t, beta != 0.0f);
    return c;
}

namespace {

// An empty reduction (k = 0) with null operands: C = beta·C (beta = 0: zeros, whatever C held).
Case matmul_empty_k_case(float beta) {
    Case c;
    c.op = "matmul";
    c.shape = label("m2 n2 k0 NN beta %g, null operands", beta);
    c.dtypes = "f32·f32->f32";
    c.t = {output_values("c", DT::F32, {1, 2, 3, 4}, Tol{0, 0, "beta·C: exact"})};
    const MatmulShape s{2, 2, 0, false, false, 1.0f, beta};
    c.run = [s](Backend& be, Bufs& b) {
        be.matmul(b.ref(0), ConstTensorRef(static_cast<const float*>(nullptr)),
                  ConstTensorRef(static_cast<const float*>(nullptr)), s);
    };
    c.ref = [beta](std::vector<Tensor>& t) {
        for (auto& x : t[0].v) x = beta == 0.0f ? 0.0 : double(beta) * x;
    };
    return c;
}

// Bad arguments: a negative size, a null output of a non-empty product.
Case matmul_bad_case(bool null_output) {
    Case c;
    c.op = "matmul";
    c.shape = null_output ? "null output of a 4x5x6 product: throws" : "k = -4: throws";
    c.dtypes = "f32·f32->f32";
    c.expect_error = true;
    c.t = {input("a", DT::F32, 30, 1), input("b", DT::F32, 30, 2), output("c", DT::F32, 30, Tol{})};
    c.run = [null_output](Backend& be, Bufs& b) {
        if (null_output) be.matmul(TensorRef(static_cast<float*>(nullptr)), b.ref(0), b.ref(1), MatmulShape{4, 5, 6});
        else be.matmul(b.ref(2), b.ref(0), b.ref(1), MatmulShape{2, 2, -4});
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

// ---- embedding

std::vector<double> tokens_of(int64_t n, int64_t V, uint32_t seed) {
    std::vector<double> tok(static_cast<size_t>(n));
    uint32_t x = seed;
    for (auto& t : tok) x = x * 1664525u + 1013904223u, t = double((x >> 8) % uint32_t(V));
    if (n > 2) tok[1] = tok[0], tok[2] = tok[0];  // a repeated token
    return tok;
}

Case embedding_fwd_case(int64_t B, int64_t T, int64_t C, int64_t V, uint32_t seed, std::vector<double> tokens = {}) {
    Case c;
    c.op = "embedding_forward";
    c.shape = label("B%lld T%lld C%lld V%lld", (long long)B, (long long)T, (long long)C, (long long)V);
    c.dtypes = "bf16";
    const bool bad = !tokens.empty();  // a token outside [0, V): the op must refuse
    if (bad) c.shape += " token V (out of range): throws", c.expect_error = true;
    c.t.push_back(input_values("tokens", DT::I32, bad ? tokens : tokens_of(B * T, V, seed)));
    c.t.push_back(input("wte", DT::BF16, V * C, seed + 1));
    c.t.push_back(input("wpe", DT::BF16, (T + 3) * C, seed + 2));
    // summed in fp32 and rounded once: the reference does the same float sum and rounding (exact)
    c.t.push_back(output("out", DT::BF16, B * T * C, Tol{0, 0, "fp32 sum, one rounding to nearest even: exact"}));
    c.run = [=](Backend& be, Bufs& b) {
        be.embedding_forward(b.at<bf16>(3), b.at<int32_t>(0), b.at<bf16>(1), b.at<bf16>(2), B, T, C, V);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        for (int64_t i = 0; i < B * T; ++i)
            for (int64_t ch = 0; ch < C; ++ch)
                t[3].v[size_t(i * C + ch)] =
                    round_to(DT::BF16, float(t[1].v[size_t(int64_t(t[0].v[size_t(i)]) * C + ch)]) +
                                           float(t[2].v[size_t((i % T) * C + ch)]));
    };
    c.flops = double(B * T * C);
    c.bytes = double(B * T) * 4 + 3.0 * double(B * T * C) * 2;  // tokens, two rows read, one written
    return c;
}

Case embedding_bwd_case(int64_t B, int64_t T, int64_t C, int64_t V, DT dwte_dt, DT dwpe_dt, bool with_wpe,
                        uint32_t seed, bool repeated = false) {
    Case c;
    c.op = "embedding_backward";
    c.shape = label("B%lld T%lld C%lld V%lld dwte %s dwpe %s%s", (long long)B, (long long)T, (long long)C, (long long)V,
                    dt_name(dwte_dt), with_wpe ? dt_name(dwpe_dt) : "null",
                    repeated ? " tokens (5i mod 3): heavy repetition" : "");
    c.dtypes = std::string("bf16->") + dt_name(dwte_dt) + "," + dt_name(dwpe_dt);
    c.deterministic = true;  // documented: fixed summation order, no atomics
    std::vector<double> tok = tokens_of(B * T, V, seed);
    if (repeated)
        for (size_t i = 0; i < tok.size(); ++i) tok[i] = double((i * 5) % 3);
    c.t.push_back(input_values("tokens", DT::I32, tok));
    c.t.push_back(input("dout", DT::BF16, B * T * C, seed + 1));
    c.t.push_back(output_random("dwte", dwte_dt, V * C, seed + 2, tol_rounded(dwte_dt, B * T)));
    c.t.push_back(output_random("dwpe", dwpe_dt, with_wpe ? (T + 3) * C : 0, seed + 3, tol_rounded(dwpe_dt, B)));
    c.run = [=](Backend& be, Bufs& b) {
        be.embedding_backward(b.ref(2), with_wpe ? b.ref(3) : TensorRef(), b.at<bf16>(1), b.at<int32_t>(0), B, T, C, V);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::embedding_backward(&t[2].v, with_wpe ? &t[3].v : nullptr, t[1].v, t[0].v, B, T, C);
    };
    c.flops = 2.0 * double(B * T * C);
    // tokens, dout, and the rows touched: B·T rows of dwte and T rows of dwpe, each read and written
    c.bytes = double(B * T) * (4.0 + 2.0 * double(C)) +
              2.0 * double(C) *
                  (double(B * T) * double(dt_bytes(dwte_dt)) + (with_wpe ? double(T * dt_bytes(dwpe_dt)) : 0.0));
    return c;
}

// ---- layernorm

Case layernorm_fwd_case(int64_t N, int64_t C, uint32_t seed) {
    Case c;
    c.op = "layernorm_forward";
    c.shape = label("N%lld C%lld", (long long)N, (long long)C);
    c.dtypes = "bf16 (f32 params)";
    c.t.push_back(input("x", DT::BF16, N * C, seed, -1.0, 5.0));  // mean ~2: centring matters
    c.t.push_back(input("weight", DT::F32, C, seed + 1, 0.5, 1.5));
    c.t.push_back(input("bias", DT::F32, C, seed + 2));
    c.t.push_back(output("out", DT::BF16, N * C, tol_rounded(DT::BF16, C)));
    c.t.push_back(output("mean", DT::F32, N, tol_rounded(DT::F32, C)));
    c.t.push_back(output("rstd", DT::F32, N, tol_rounded(DT::F32, C)));
    c.run = [=](Backend& be, Bufs& b) {
        be.layernorm_forward(b.at<bf16>(3), b.at<float>(4), b.at<float>(5), b.at<bf16>(0), b.at<float>(1),
                             b.at<float>(2), N, C, 1e-5f);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::layernorm_forward(t[3].v, &t[4].v, &t[5].v, t[0].v, t[1].v, t[2].v, N, C, double(1e-5f));
    };
    c.flops = 8.0 * double(N * C);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case layernorm_bwd_case(int64_t N, int64_t C, bool accumulate, uint32_t seed) {
    Case c;
    c.op = "layernorm_backward";
    c.shape = label("N%lld C%lld%s", (long long)N, (long long)C, accumulate ? " accumulate dinp" : "");
    c.dtypes = "bf16 (f32 params)";
    Tensor x = input("x", DT::BF16, N * C, seed, -1.0, 5.0);
    std::vector<double> out(static_cast<size_t>(N * C)), w1(static_cast<size_t>(C), 1.0),
        b0(static_cast<size_t>(C), 0.0), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
    if (x.lazy == 0)  // a perf shape's x has no host values: mean and rstd are then placeholders
        ref::layernorm_forward(out, &mean, &rstd, x.v, w1, b0, N, C, double(1e-5f));
    else std::fill(rstd.begin(), rstd.end(), 1.0);
    c.t.push_back(std::move(x));
    c.t.push_back(input("dout", DT::BF16, N * C, seed + 1));
    c.t.push_back(input("weight", DT::F32, C, seed + 2, 0.5, 1.5));
    c.t.push_back(input_values("mean", DT::F32, mean));  // what the forward saves (fp32)
    c.t.push_back(input_values("rstd", DT::F32, rstd));
    c.t.push_back(accumulate ? output_random("dinp", DT::BF16, N * C, seed + 3, tol_rounded(DT::BF16, C))
                             : output("dinp", DT::BF16, N * C, tol_rounded(DT::BF16, C)));
    c.t.push_back(output_random("dweight", DT::F32, C, seed + 4, tol_rounded(DT::F32, std::max(N, C))));
    c.t.push_back(output_random("dbias", DT::F32, C, seed + 5, tol_rounded(DT::F32, N)));
    c.run = [=](Backend& be, Bufs& b) {
        be.layernorm_backward(b.at<bf16>(5), b.at<float>(6), b.at<float>(7), b.at<bf16>(1), b.at<bf16>(0),
                              b.at<float>(2), b.at<float>(3), b.at<float>(4), N, C, accumulate);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        ref::layernorm_backward(t[5].v, &t[6].v, &t[7].v, t[1].v, t[0].v, t[2].v, t[3].v, t[4].v, N, C, accumulate);
    };
    c.flops = 14.0 * double(N * C);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

// ---- swiglu

Case swiglu_fwd_case(int64_t n, uint32_t seed) {
    Case c;
    c.op = "swiglu_forward";
    c.shape = label("n%lld", (long long)n);
    c.dtypes = "bf16";
    c.t.push_back(input("a", DT::BF16, n, seed, -8.0, 8.0));
    c.t.push_back(input("b", DT::BF16, n, seed + 1, -2.0, 2.0));
    c.t.push_back(output("h", DT::BF16, n, tol_rounded(DT::BF16, 4)));
    c.run = [=](Backend& be, Bufs& b) { be.swiglu_forward(b.at<bf16>(2), b.at<bf16>(0), b.at<bf16>(1), n); };
    c.ref = [](std::vector<Tensor>& t) { ref::swiglu_forward(t[2].v, t[0].v, t[1].v); };
    c.flops = 6.0 * double(n);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case swiglu_bwd_case(int64_t n, uint32_t seed) {
    Case c;
    c.op = "swiglu_backward";
    c.shape = label("n%lld", (long long)n);
    c.dtypes = "bf16";
    c.t.push_back(input("dh", DT::BF16, n, seed));
    c.t.push_back(input("a", DT::BF16, n, seed + 1, -8.0, 8.0));
    c.t.push_back(input("b", DT::BF16, n, seed + 2, -2.0, 2.0));
    c.t.push_back(output("da", DT::BF16, n, tol_rounded(DT::BF16, 8)));
    c.t.push_back(output("db", DT::BF16, n, tol_rounded(DT::BF16, 4)));
    c.run = [=](Backend& be, Bufs& b) {
        be.swiglu_backward(b.at<bf16>(3), b.at<bf16>(4), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2), n);
    };
    c.ref = [](std::vector<Tensor>& t) { ref::swiglu_backward(t[3].v, t[4].v, t[0].v, t[1].v, t[2].v); };
    c.flops = 12.0 * double(n);
    c.bytes = tensor_bytes(c.t);
    return c;
}

// The CUDA kernels' cases (the removed test_dense_ops.cpp of tests/gpu before; docs/backend-ops.md "Old tests"):
// cuBLASLt at sizes off its tiles for every transpose, an empty output, SwiGLU's 16-byte path (n % 8
// == 0), LayerNorm over 300 rows at the GPT-2 widths, the embedding's backward over more than one
// 512-key chunk of its counting sort; (large) the linear layer at a model's shape.
void add_dense_device_cases(std::vector<Case>& out, const TableOptions& o) {
    uint32_t seed = 200;
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            out.push_back(matmul_case(67, 129, 96, ta, tb, 1, 0, DT::BF16, DT::BF16, DT::F32, seed += 3));
            out.push_back(matmul_case(67, 129, 96, ta, tb, 1, 1, DT::F32, DT::BF16, DT::BF16, seed += 3));
        }
    out.push_back(matmul_case(0, 16, 8, false, true, 1, 0, DT::BF16, DT::BF16, DT::F32, seed += 3));  // m = 0
    out.push_back(swiglu_fwd_case(65536, 210));
    out.push_back(swiglu_bwd_case(65536, 211));
    out.push_back(swiglu_fwd_case(65537, 212));
    out.push_back(layernorm_fwd_case(300, 768, 213));
    out.push_back(layernorm_fwd_case(300, 1000, 214));
    out.push_back(layernorm_bwd_case(300, 768, true, 215));
    out.push_back(layernorm_bwd_case(300, 1000, false, 216));
    out.push_back(embedding_fwd_case(5, 130, 80, 1000, 217));
    out.push_back(embedding_bwd_case(5, 130, 80, 1000, DT::F32, DT::F32, true, 218));
    out.push_back(embedding_bwd_case(5, 130, 80, 1000, DT::BF16, DT::BF16, true, 219));
    if (o.large) {  // the linear layer's three products at 512 tokens, 768 -> 1024
        out.push_back(large_row(matmul_case(512, 1024, 768, false, true, 1, 0, DT::BF16, DT::BF16, DT::BF16, 220)));
        out.push_back(large_row(matmul_case(512, 768, 1024, false, false, 1, 0, DT::BF16, DT::BF16, DT::BF16, 221)));
        out.push_back(large_row(matmul_case(1024, 768, 512, true, false, 1, 1, DT::BF16, DT::BF16, DT::F32, 222)));
        // 2^24 rows: 65,536 row chunks of the dweight/dbias partial sums, one more than grid.y holds
        out.push_back(large_row(layernorm_bwd_case(int64_t(1) << 24, 1, false, 223)));
    }
}

}  // namespace

void add_dense_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The shape set's tokens, d_model and vocabulary (the paper's on the CPU: 1 x 128 tokens).
        const PerfDims d = perf_dims(o);
        const int64_t B = d.batch, T = d.seq_len, N = B * T, C = d.d_model, V = d.padded_vocab;
        out.push_back(matmul_case(N, 3 * C, C, false, true, 1, 0, DT::BF16, DT::BF16, DT::BF16, 1));  // qkv
        out.push_back(matmul_case(N, C, C, false, true, 1, 0, DT::BF16, DT::BF16, DT::BF16, 2));      // proj
        out.push_back(matmul_case(C, C, N, true, false, 1, 1, DT::BF16, DT::BF16, DT::F32, 3));       // dweight
        out.push_back(matmul_case(N, C, C, false, false, 1, 0, DT::BF16, DT::BF16, DT::BF16, 10));    // dinp
        out.push_back(embedding_fwd_case(B, T, C, V, 4));
        out.push_back(embedding_bwd_case(B, T, C, V, DT::F32, DT::F32, true, 5));
        out.push_back(layernorm_fwd_case(N, C, 6));
        out.push_back(layernorm_bwd_case(N, C, true, 7));
        out.push_back(swiglu_fwd_case(N * d.d_ff, 8));
        out.push_back(swiglu_bwd_case(N * d.d_ff, 9));
        return;
    }
    out.push_back(matmul_case(67, 45, 33, false, false, 1, 0, DT::F32, DT::F32, DT::F32, 10));
    out.push_back(matmul_case(67, 45, 33, true, false, 0.5f, 1, DT::BF16, DT::BF16, DT::BF16, 11));
    out.push_back(matmul_case(1, 96, 128, false, true, 1, 0, DT::BF16, DT::F32, DT::F32, 12));  // T = 1
    out.push_back(matmul_case(130, 70, 129, true, true, 1, 1, DT::BF16, DT::BF16, DT::F32, 13));
    out.push_back(matmul_case(64, 64, 1, false, true, 2, 0, DT::F32, DT::BF16, DT::BF16, 14));  // k = 1
    out.push_back(matmul_case(33, 257, 64, false, true, 1, 0, DT::BF16, DT::BF16, DT::BF16, 15));
    // every transpose, operand and output dtype, beta 0 and 1, at a small shape
    uint32_t seed = 100;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (DT da : {DT::F32, DT::BF16})
                for (DT db : {DT::F32, DT::BF16})
                    for (DT dc : {DT::F32, DT::BF16})
                        for (float beta : {0.0f, 1.0f})
                            out.push_back(matmul_case(5, 7, 9, ta, tb, 0.5f, beta, da, db, dc, seed += 3));
    out.push_back(matmul_empty_k_case(1.0f));
    out.push_back(matmul_empty_k_case(0.0f));
    out.push_back(matmul_bad_case(false));
    out.push_back(matmul_bad_case(true));
    out.push_back(embedding_fwd_case(2, 7, 40, 11, 20));
    out.push_back(embedding_fwd_case(1, 1, 64, 5, 21));  // T = 1
    out.push_back(embedding_fwd_case(1, 2, 4, 2, 25, {0, 2}));
    out.push_back(embedding_bwd_case(2, 7, 40, 11, DT::F32, DT::BF16, true, 22));
    out.push_back(embedding_bwd_case(4, 16, 8, 7, DT::BF16, DT::F32, true, 23));
    out.push_back(embedding_bwd_case(4, 16, 8, 7, DT::F32, DT::BF16, true, 26, true));
    out.push_back(embedding_bwd_case(2, 5, 24, 9, DT::F32, DT::F32, false, 24));  // dwpe null
    out.push_back(layernorm_fwd_case(5, 67, 30));
    out.push_back(layernorm_fwd_case(1, 256, 31));
    out.push_back(layernorm_bwd_case(5, 67, false, 32));
    out.push_back(layernorm_bwd_case(16, 64, true, 33));
    out.push_back(layernorm_bwd_case(1, 256, false, 34));
    out.push_back(swiglu_fwd_case(1003, 40));
    out.push_back(swiglu_fwd_case(1, 41));
    out.push_back(swiglu_bwd_case(1003, 42));
    out.push_back(swiglu_bwd_case(7, 43));
    add_dense_device_cases(out, o);
}

namespace {}  // namespace

void add_dense_grad_cases(std::vector<GradCase>& out) {
    {  // the linear layer (Backend::matmul_forward / matmul_backward over matmul), fp32
        struct S {
            int64_t n = 4, in = 5, outf = 3;
            std::vector<float> x = uniform_f32(20, 20), w = uniform_f32(15, 21), r = uniform_f32(12, 22);
            std::unique_ptr<Backend> be = make_cpu_backend();
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "matmul";
        g.shape = "linear layer n4 in5 out3 (matmul_forward / matmul_backward)";
        const std::string why = "linear in each input: fd exact up to the loss's fp32 rounding";
        g.in = {{"inp", &s->x, 1e-2f, 1e-4, 1e-3, why}, {"weight", &s->w, 1e-2f, 1e-4, 1e-3, why}};
        g.loss = [s] {
            std::vector<float> o(size_t(s->n * s->outf));
            s->be->matmul_forward(o.data(), s->x.data(), s->w.data(), s->n, s->in, s->outf);
            return dot_f32(o, s->r);
        };
        g.analytic = [s] {
            std::vector<float> dx(s->x.size()), dw(s->w.size(), 0.0f);
            s->be->matmul_backward(dx.data(), dw.data(), s->r.data(), s->x.data(), s->w.data(), s->n, s->in, s->outf);
            return std::vector<std::vector<float>>{dx, dw};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
    {  // embedding: linear, so central differences are exact up to the fp32 rounding of the loss
        struct S {
            int64_t B = 2, T = 3, C = 4, V = 5;
            std::vector<float> wte = uniform_f32(20, 3), wpe = uniform_f32(12, 4), r = uniform_f32(24, 5);
            std::vector<int32_t> tok{4, 0, 4, 2, 4, 1};
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "embedding_backward";
        g.shape = "B2 T3 C4 V5 (token 4 thrice, 3 never)";
        const std::string why = "linear op: fd exact up to the loss's fp32 rounding (~1e-7 / eps)";
        g.in = {{"wte", &s->wte, 1e-2f, 1e-4, 1e-3, why}, {"wpe", &s->wpe, 1e-2f, 1e-4, 1e-3, why}};
        g.loss = [s] {
            std::vector<float> o(static_cast<size_t>(s->B * s->T * s->C));
            cpu::embedding_forward(o.data(), s->tok.data(), s->wte.data(), s->wpe.data(), s->B, s->T, s->C, s->V);
            return dot_f32(o, s->r);
        };
        g.analytic = [s] {
            std::vector<float> dwte(s->wte.size(), 0.0f), dwpe(s->wpe.size(), 0.0f);
            cpu::embedding_backward(dwte.data(), dwpe.data(), s->r.data(), s->tok.data(), s->B, s->T, s->C, s->V);
            return std::vector<std::vector<float>>{dwte, dwpe};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
    {  // layernorm
        struct S {
            int64_t N = 3, C = 8;
            std::vector<float> x = uniform_f32(24, 2), w = uniform_f32(8, 3, 0.5, 1.5), b = uniform_f32(8, 4),
                               r = uniform_f32(24, 5);
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "layernorm_backward";
        g.shape = "N3 C8";
        const std::string why = "fp32 forward, eps 1e-3: truncation ~1e-6, rounding ~1e-4 absolute";
        g.in = {{"inp", &s->x, 1e-3f, 5e-4, 1e-2, why},
                {"weight", &s->w, 1e-3f, 5e-4, 1e-2, why},
                {"bias", &s->b, 1e-3f, 5e-4, 1e-2, why}};
        g.loss = [s] {
            std::vector<float> o(s->x.size());
            cpu::layernorm_forward(o.data(), (float*)nullptr, (float*)nullptr, s->x.data(), s->w.data(), s->b.data(),
                                   s->N, s->C, 1e-5f);
            return dot_f32(o, s->r);
        };
        g.analytic = [s] {
            std::vector<float> o(s->x.size()), mean(static_cast<size_t>(s->N)), rstd(static_cast<size_t>(s->N)),
                dx(s->x.size()), dw(s->w.size(), 0.0f), db(s->b.size(), 0.0f);
            cpu::layernorm_forward(o.data(), mean.data(), rstd.data(), s->x.data(), s->w.data(), s->b.data(), s->N,
                                   s->C, 1e-5f);
            cpu::layernorm_backward(dx.data(), dw.data(), db.data(), s->r.data(), s->x.data(), s->w.data(), mean.data(),
                                    rstd.data(), s->N, s->C, false);
            return std::vector<std::vector<float>>{dx, dw, db};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
    {  // swiglu
        struct S {
            int64_t n = 40;
            std::vector<float> a = uniform_f32(40, 1, -4, 4), b = uniform_f32(40, 2, -2, 2), r = uniform_f32(40, 3);
        };
        auto s = std::make_shared<S>();
        GradCase g;
        g.op = "swiglu_backward";
        g.shape = "n40, a in [-4, 4)";
        const std::string why = "elementwise, eps 1e-3: truncation ~1e-7, rounding ~1e-4";
        g.in = {{"a", &s->a, 1e-3f, 2e-4, 1e-3, why}, {"b", &s->b, 1e-3f, 2e-4, 1e-3, why}};
        g.loss = [s] {
            std::vector<float> h(static_cast<size_t>(s->n));
            cpu::swiglu_forward(h.data(), s->a.data(), s->b.data(), s->n);
            return dot_f32(h, s->r);
        };
        g.analytic = [s] {
            std::vector<float> da(static_cast<size_t>(s->n)), db(static_cast<size_t>(s->n));
            cpu::swiglu_backward(da.data(), db.data(), s->r.data(), s->a.data(), s->b.data(), s->n);
            return std::vector<std::vector<float>>{da, db};
        };
        g.state = s;
        out.push_back(std::move(g));
    }
}

}  // namespace skew::ops
