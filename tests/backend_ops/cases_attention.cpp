// Op-table rows of causal GQA attention (tests/backend_ops/op_table.h): forward and backward against
// the double evaluation at head_dim 3..128, GQA groups 1/2/4/8, T = 1, T = 150 across several query
// blocks, the forward of a KV-cache step (kv_len > T: the last T of kv_len positions), and the errors
// for n_heads not a multiple of n_kv_heads, kv_len below T and a backward with kv_len != T; finite
// differences on the CPU's fp32 path (T = 70 across query blocks, and a grouped case).
#include <cmath>
#include <memory>

#include "kernels/cpu/cpu_ops.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/reference.h"

namespace skew::ops {

namespace {

std::string label(const AttentionShape& s) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "B%lld T%lld H%lld KV%lld D%lld (group %lld)", (long long)s.batch,
                  (long long)s.seq_len, (long long)s.n_heads, (long long)s.n_kv_heads, (long long)s.head_dim,
                  (long long)(s.n_kv_heads > 0 ? s.n_heads / s.n_kv_heads : 0));
    return s.kv_len > 0 ? buf + std::string(" kv_len ") + std::to_string(s.kv_len) : buf;
}

// The CUDA kernels take head_dim 16, 32, 64 or 128 only (kernels/cuda/attention.cu).
bool cuda_head_dim(const BackendTraits& be, int64_t d) {
    return !be.runs_cuda || d == 16 || d == 32 || d == 64 || d == 128;
}

int64_t nq(const AttentionShape& s) { return s.batch * s.seq_len * s.n_heads * s.head_dim; }
int64_t nkv(const AttentionShape& s) { return s.batch * s.keys() * s.n_kv_heads * s.head_dim; }

// Causal attention: per (batch, head) T·off + T(T+1)/2 score dot products (off = kv_len - T, the
// position of query row 0) and as many P·V terms of D each.
double attn_flops(const AttentionShape& s) {
    const double T = double(s.seq_len), off = double(s.keys() - s.seq_len);
    return 4.0 * double(s.batch * s.n_heads) * (T * off + T * (T + 1) / 2.0) * double(s.head_dim);
}

Case fwd_case(const AttentionShape& s, uint32_t seed) {
    Case c;
    c.op = "attention_forward";
    c.shape = label(s);
    c.dtypes = "bf16 (lse f32)";
    // out: bf16, sums over up to kv_len keys of D-term scores; lse: f32 after a length-kv_len sum.
    const int64_t k = std::max(s.keys(), s.head_dim);
    c.t = {input("q", DT::BF16, nq(s), seed, -2, 2), input("k", DT::BF16, nkv(s), seed + 1, -2, 2),
           input("v", DT::BF16, nkv(s), seed + 2), output("out", DT::BF16, nq(s), tol_rounded(DT::BF16, k)),
           output("lse", DT::F32, s.batch * s.n_heads * s.seq_len, tol_rounded(DT::F32, k))};
    c.run = [s](Backend& be, Bufs& b) {
        be.attention_forward(b.at<bf16>(3), b.at<float>(4), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2), s);
    };
    c.ref = [s](std::vector<Tensor>& t) { ref::attention_forward(t[3].v, t[4].v, t[0].v, t[1].v, t[2].v, s); };
    c.supports = [d = s.head_dim](const BackendTraits& be) { return cuda_head_dim(be, d); };
    c.flops = attn_flops(s);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case bwd_case(const AttentionShape& s, uint32_t seed) {
    Case c;
    c.op = "attention_backward";
    c.shape = label(s);
    c.dtypes = "bf16 (lse f32)";
    Tensor q = input("q", DT::BF16, nq(s), seed, -2, 2), k = input("k", DT::BF16, nkv(s), seed + 1, -2, 2),
           v = input("v", DT::BF16, nkv(s), seed + 2);
    // out and lse as the forward saves them: the exact values rounded to bf16 / f32. The rounded out
    // enters Σ dout·out (2^-8 relative), hence the bf16 limit on every gradient.
    std::vector<double> out(static_cast<size_t>(nq(s))), lse(static_cast<size_t>(s.batch * s.n_heads * s.seq_len));
    if (q.lazy == 0) ref::attention_forward(out, lse, q.v, k.v, v.v, s);
    const int64_t kk = s.seq_len * s.head_dim;
    c.t = {input("dout", DT::BF16, nq(s), seed + 3),
           std::move(q),
           std::move(k),
           std::move(v),
           q.lazy ? input("out", DT::BF16, nq(s), seed + 4) : input_values("out", DT::BF16, out),
           input_values("lse", DT::F32, lse),
           output("dq", DT::BF16, nq(s), tol_rounded(DT::BF16, kk, 0.25)),
           output("dk", DT::BF16, nkv(s), tol_rounded(DT::BF16, kk, 0.25)),
           output("dv", DT::BF16, nkv(s), tol_rounded(DT::BF16, kk, 0.25))};
    c.run = [s](Backend& be, Bufs& b) {
        be.attention_backward(b.at<bf16>(6), b.at<bf16>(7), b.at<bf16>(8), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2),
                              b.at<bf16>(3), b.at<bf16>(4), b.at<float>(5), s);
    };
    c.ref = [s](std::vector<Tensor>& t) {
        ref::attention_backward(t[6].v, t[7].v, t[8].v, t[0].v, t[1].v, t[2].v, t[3].v, s);
    };
    c.supports = [d = s.head_dim](const BackendTraits& be) { return cuda_head_dim(be, d); };
    c.flops = 2.5 * attn_flops(s);  // QK^T recomputed, dP, dQ, dK, dV
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case bad_group_case() {
    const AttentionShape s{1, 4, 4, 3, 16};  // 4 query heads over 3 KV heads: not a multiple
    Case c;
    c.op = "attention_forward";
    c.shape = "H4 KV3 (not a multiple): throws";
    c.dtypes = "bf16 (lse f32)";
    c.expect_error = true;
    c.t = {input("q", DT::BF16, nq(s), 1), input("k", DT::BF16, nkv(s), 2), input("v", DT::BF16, nkv(s), 3),
           output("out", DT::BF16, nq(s), Tol{}), output("lse", DT::F32, 16, Tol{})};
    c.run = [s](Backend& be, Bufs& b) {
        be.attention_forward(b.at<bf16>(3), b.at<float>(4), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2), s);
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

// A KV-cache shape the op refuses: kv_len below seq_len (forward), or a backward of kv_len != seq_len.
Case bad_kv_len_case(bool backward) {
    const AttentionShape s = backward ? AttentionShape{1, 4, 2, 1, 16, 6} : AttentionShape{1, 4, 2, 1, 16, 3};
    Case c;
    c.op = backward ? "attention_backward" : "attention_forward";
    c.shape = backward ? "T4 kv_len 6 (a KV-cache step): throws" : "T4 kv_len 3 (below T): throws";
    c.dtypes = "bf16 (lse f32)";
    c.expect_error = true;
    const int64_t nq4 = 4 * 2 * 16, nkv6 = 6 * 16;
    c.t = {
        input("q", DT::BF16, nq4, 1),       input("k", DT::BF16, nkv6, 2),      input("v", DT::BF16, nkv6, 3),
        input("out", DT::BF16, nq4, 4),     input("lse", DT::F32, 8, 5),        output("a", DT::BF16, nq4, Tol{}),
        output("b", DT::BF16, nkv6, Tol{}), output("c", DT::BF16, nkv6, Tol{}), output("lse_out", DT::F32, 8, Tol{})};
    c.run = [s, backward](Backend& be, Bufs& b) {
        if (backward)
            be.attention_backward(b.at<bf16>(5), b.at<bf16>(6), b.at<bf16>(7), b.at<bf16>(3), b.at<bf16>(0),
                                  b.at<bf16>(1), b.at<bf16>(2), b.at<bf16>(3), b.at<float>(4), s);
        else be.attention_forward(b.at<bf16>(5), b.at<float>(8), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2), s);
    };
    c.ref = [](std::vector<Tensor>&) {};
    return c;
}

// A head_dim the CUDA kernels have no instantiation for (96): CUDA refuses it; the CPU runs any.
Case bad_head_dim_case() {
    const AttentionShape s{1, 4, 2, 1, 96};
    Case c;
    c.op = "attention_forward";
    c.shape = "D96 (no CUDA kernel): throws on CUDA";
    c.dtypes = "bf16 (lse f32)";
    c.expect_error = true;
    c.t = {input("q", DT::BF16, nq(s), 1), input("k", DT::BF16, nkv(s), 2), input("v", DT::BF16, nkv(s), 3),
           output("out", DT::BF16, nq(s), Tol{}), output("lse", DT::F32, 8, Tol{})};
    c.run = [s](Backend& be, Bufs& b) {
        be.attention_forward(b.at<bf16>(3), b.at<float>(4), b.at<bf16>(0), b.at<bf16>(1), b.at<bf16>(2), s);
    };
    c.ref = [](std::vector<Tensor>&) {};
    c.supports = [](const BackendTraits& be) { return be.runs_cuda; };
    return c;
}

}  // namespace

void add_attention_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The shape set's tokens and heads (the paper's on the CPU: batch 1).
        const PerfDims d = perf_dims(o);
        const AttentionShape s{d.batch, d.seq_len, d.n_heads, d.n_kv_heads, d.head_dim};
        out.push_back(fwd_case(s, 1));
        out.push_back(bwd_case(s, 2));
        if (d.set == "paper" && !d.scaled)  // long contexts at the paper's heads, the batch scaled down
            for (const AttentionShape& l :
                 {AttentionShape{16, 1024, 32, 8, 128}, AttentionShape{4, 4096, 32, 8, 128}}) {
                out.push_back(fwd_case(l, 3));
                out.push_back(bwd_case(l, 4));
            }
        return;
    }
    const std::vector<AttentionShape> shapes{
        {2, 5, 4, 2, 3},     // grouped: head h reads KV head h / 2 (not h % 2)
        {1, 150, 2, 1, 8},   // query blocks of 64, 64 and 22 rows
        {1, 150, 2, 1, 16},  // the same on every backend's head_dim
        {1, 1, 4, 1, 64},    // T = 1, group 4
        {2, 33, 8, 1, 128},  // group 8, T off the block
        {1, 70, 8, 2, 32},   // group 4, blocks of 64 and 6
        {2, 17, 4, 4, 16},   // group 1 (multi-head)
    };
    uint32_t seed = 100;
    for (const auto& s : shapes) out.push_back(fwd_case(s, seed += 10));
    for (const auto& s : shapes) out.push_back(bwd_case(s, seed += 10));
    out.push_back(bad_group_case());
    // A KV-cache step (model/inference.h): the last T of kv_len positions. One row after one tile, on
    // a tile's last key and after three 64-key tiles; a few rows straddling a 64-row query block;
    // every head_dim of the CUDA kernels; groups 1, 2, 4, 8.
    const std::vector<AttentionShape> kv_shapes{
        {1, 1, 4, 2, 16, 70},  {1, 1, 4, 1, 32, 64},   {2, 1, 8, 1, 64, 200}, {1, 1, 2, 2, 128, 150},
        {1, 3, 8, 2, 16, 130}, {1, 70, 4, 2, 32, 100}, {2, 2, 4, 2, 3, 9},
    };
    for (const auto& s : kv_shapes) out.push_back(fwd_case(s, seed += 10));
    out.push_back(bad_kv_len_case(false));
    out.push_back(bad_kv_len_case(true));
    // The CUDA kernels' cases (the removed test_attention.cpp of tests/gpu before; docs/backend-ops.md "Old tests"):
    // every head_dim at group 1, 2, 4 and 8, T = 1, T off the 64-row tile.
    const std::vector<AttentionShape> cuda_shapes{
        {2, 77, 8, 2, 64},    {3, 1, 8, 1, 128}, {1, 130, 4, 1, 128}, {2, 32, 2, 2, 128}, {1, 200, 4, 4, 64},
        {1, 100, 16, 2, 128}, {1, 65, 8, 1, 64}, {2, 32, 4, 2, 16},   {1, 45, 4, 4, 32},  {2, 128, 4, 2, 32},
    };
    for (const auto& s : cuda_shapes) out.push_back(fwd_case(s, seed += 10));
    for (const auto& s : cuda_shapes) out.push_back(bwd_case(s, seed += 10));
    {  // documented deterministic (docs/attention.md: no atomics): two runs, the same bits
        Case c = bwd_case({1, 150, 8, 2, 128}, seed += 10);
        c.deterministic = true;
        out.push_back(std::move(c));
    }
    // Pointers 4- but not 16-byte aligned: the CUDA-core fallback (kernels/cuda/attention.cu), and
    // batch x heads past 65,535 (its flat grid: 33,000 x 2 query heads).
    for (const AttentionShape& s : std::vector<AttentionShape>{
             {2, 77, 8, 2, 64}, {1, 1, 2, 1, 64}, {1, 45, 4, 4, 32}, {33000, 2, 2, 1, 16}, {1, 1, 4, 2, 64, 90}})
        for (bool backward : {false, true}) {
            if (backward && s.kv_len > 0) continue;  // a KV-cache step has no backward
            Case c = backward ? bwd_case(s, seed += 10) : fwd_case(s, seed += 10);
            c.misalign_bytes = 4;
            c.shape += " 4-byte aligned";
            out.push_back(std::move(c));
        }
    out.push_back(bad_head_dim_case());
    if (o.large)  // the paper's heads (32 over 8 of 128) and T at batch 1; a long context (16 query tiles)
        for (const AttentionShape& s : std::vector<AttentionShape>{{1, 128, 32, 8, 128}, {1, 1024, 4, 1, 128}}) {
            out.push_back(large_row(fwd_case(s, seed += 10)));
            out.push_back(large_row(bwd_case(s, seed += 10)));
        }
}

namespace {

GradCase grad_case(const AttentionShape& s, uint32_t seed, std::string note) {
    struct S {
        AttentionShape s;
        std::vector<float> q, k, v, r;
    };
    auto st = std::make_shared<S>(S{s, uniform_f32(nq(s), seed), uniform_f32(nkv(s), seed + 1),
                                    uniform_f32(nkv(s), seed + 2), uniform_f32(nq(s), seed + 3)});
    GradCase g;
    g.op = "attention_backward";
    g.shape = label(s) + note;
    const std::string why = "fp32 forward, eps 1e-2 on O(1) inputs: truncation ~1e-5, rounding ~5e-5";
    g.in = {{"q", &st->q, 1e-2f, 5e-4, 1e-2, why},
            {"k", &st->k, 1e-2f, 5e-4, 1e-2, why},
            {"v", &st->v, 1e-2f, 5e-4, 1e-2, why}};
    g.loss = [st] {
        std::vector<float> out(st->q.size());
        cpu::attention_forward(out.data(), (float*)nullptr, st->q.data(), st->k.data(), st->v.data(), st->s);
        double d = 0.0;
        for (size_t i = 0; i < out.size(); ++i) d += double(out[i]) * st->r[i];
        return d;
    };
    g.analytic = [st] {
        const AttentionShape& s = st->s;
        std::vector<float> out(st->q.size()), lse(static_cast<size_t>(s.batch * s.n_heads * s.seq_len)),
            dq(st->q.size()), dk(st->k.size()), dv(st->v.size());
        cpu::attention_forward(out.data(), lse.data(), st->q.data(), st->k.data(), st->v.data(), s);
        cpu::attention_backward(dq.data(), dk.data(), dv.data(), st->r.data(), st->q.data(), st->k.data(), st->v.data(),
                                out.data(), lse.data(), s);
        return std::vector<std::vector<float>>{dq, dk, dv};
    };
    g.state = st;
    return g;
}

}  // namespace

void add_attention_grad_cases(std::vector<GradCase>& out) {
    out.push_back(grad_case({1, 70, 2, 1, 2}, 24, ", query blocks of 64 and 6"));
    out.push_back(grad_case({2, 4, 4, 2, 3}, 7, ", K/V gradients summed over the group"));
}

}  // namespace skew::ops
