// Op-table rows of the element-wise ops and reductions (tests/backend_ops/op_table.h): residual,
// accumulate, scale, zero, convert in both dtypes, sum_squares over several buffers, dot_accumulate
// with a leading dimension, and init_normal against its Philox definition.
#include <cmath>

#include "kernels/common/init_math.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

namespace {

// The element-wise ops compute in fp32 and round once to the destination: the reference does the
// same float operation and rounding, so the limit is exact (every backend must match it bit for bit).
const char* kExactF32 = "the fp32 operation and one rounding to nearest even, reproduced exactly";

Case residual_case(Tensor a, Tensor b, bool alias, std::string note) {
    Case c;
    c.op = "residual_forward";
    const int64_t n = a.numel();
    c.shape = label("n%lld", (long long)n) + note;
    c.dtypes = "bf16";
    if (alias) {  // out aliases a: a is the output, its initial values the input
        a.out = true;
        a.tol = Tol{0, 0, kExactF32};
        c.t = {std::move(a), std::move(b)};
    } else {
        c.t = {std::move(a), std::move(b), output("out", DT::BF16, n, Tol{0, 0, kExactF32})};
    }
    const size_t o = alias ? 0 : 2;
    c.run = [n, o](Backend& be, Bufs& b) { be.residual_forward(b.at<bf16>(o), b.at<bf16>(0), b.at<bf16>(1), n); };
    c.ref = [o](std::vector<Tensor>& t) {
        for (size_t i = 0; i < t[1].v.size(); ++i) t[o].v[i] = round_to(DT::BF16, float(t[0].v[i]) + float(t[1].v[i]));
    };
    c.flops = double(n);
    c.bytes = 3.0 * 2.0 * double(n);
    return c;
}

Case residual_case(int64_t n, uint32_t seed) {
    return residual_case(input("a", DT::BF16, n, seed, -4, 4), input("b", DT::BF16, n, seed + 1), false, "");
}

Case accumulate_case(int64_t n, DT dst, DT src, uint32_t seed) {
    Case c;
    c.op = "accumulate";
    c.shape = label("n%lld dst %s src %s", (long long)n, dt_name(dst), dt_name(src));
    c.dtypes = std::string(dt_name(src)) + "->" + dt_name(dst);
    c.t = {input("src", src, n, seed), output_random("dst", dst, n, seed + 1, Tol{0, 0, kExactF32})};
    c.run = [n](Backend& be, Bufs& b) { be.accumulate(b.ref(1), b.ref(0), n); };
    c.ref = [dst](std::vector<Tensor>& t) {
        for (size_t i = 0; i < t[0].v.size(); ++i) t[1].v[i] = round_to(dst, float(t[1].v[i]) + float(t[0].v[i]));
    };
    c.flops = double(n);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

Case scale_case(int64_t n, DT dt, float factor, uint32_t seed) {
    Case c;
    c.op = "scale";
    c.shape = label("n%lld factor %g", (long long)n, factor);
    c.dtypes = dt_name(dt);
    c.t = {output_random("x", dt, n, seed, Tol{0, 0, kExactF32})};
    c.run = [n, factor](Backend& be, Bufs& b) { be.scale(b.ref(0), factor, n); };
    c.ref = [factor, dt](std::vector<Tensor>& t) {
        for (auto& x : t[0].v) x = round_to(dt, float(x) * factor);
    };
    c.flops = double(n);
    c.bytes = tensor_bytes(c.t, true);
    return c;
}

Case zero_case(int64_t n, DT dt, uint32_t seed) {
    Case c;
    c.op = "zero";
    c.shape = label("n%lld", (long long)n);
    c.dtypes = dt_name(dt);
    c.t = {output_random("x", dt, n, seed, Tol{})};
    c.run = [n](Backend& be, Bufs& b) { be.zero(b.ref(0), n); };
    c.ref = [](std::vector<Tensor>& t) {
        for (auto& x : t[0].v) x = 0.0;
    };
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case convert_case(int64_t n, DT dst, DT src, uint32_t seed) {
    Case c;
    c.op = "convert";
    c.shape = label("n%lld", (long long)n);
    c.dtypes = std::string(dt_name(src)) + "->" + dt_name(dst);
    // Rounding to nearest even is exact arithmetic: the reference rounds the same way, limit 0.
    Tol exact{0.0, 0.0, "one rounding to nearest even, reproduced exactly by the reference"};
    c.t = {input("src", src, n, seed, -3, 3), output("dst", dst, n, exact)};
    c.run = [n](Backend& be, Bufs& b) { be.convert(b.ref(1), b.ref(0), n); };
    c.ref = [dst](std::vector<Tensor>& t) {
        for (size_t i = 0; i < t[0].v.size(); ++i) t[1].v[i] = round_to(dst, t[0].v[i]);
    };
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case sum_squares_case(std::vector<Tensor> in, std::string note = "") {
    Case c;
    c.op = "sum_squares";
    std::string sh;
    std::vector<int64_t> ns;
    for (auto& t : in) {
        sh += (sh.empty() ? "" : " + ") + std::to_string(t.numel()) + " " + dt_name(t.dt);
        ns.push_back(t.numel());
        c.t.push_back(std::move(t));
    }
    c.shape = sh + note;
    c.dtypes = "bf16,f32";
    c.deterministic = true;  // documented: one reduction order fixed by the shapes
    // Accumulated in double: only the summation order differs from the reference (~n·2^-53).
    Tensor r = output("sum", DT::F64, 1, Tol{1e-20, 0.0, "double accumulation of n terms: (n·2^-53)^2"});
    r.host = true;  // the value the op returns to the host
    c.t.push_back(r);
    const size_t nb = ns.size();
    c.run = [ns, nb](Backend& be, Bufs& b) {
        std::vector<BufferRef> refs;
        for (size_t i = 0; i < nb; ++i) refs.push_back(BufferRef{ConstTensorRef(b.ref(i)), ns[i]});
        b.host(nb)[0] = be.sum_squares(refs);
    };
    c.ref = [nb](std::vector<Tensor>& t) {
        double s = 0.0;
        for (size_t i = 0; i < nb; ++i)
            for (double x : t[i].v) s += x * x;
        t[nb].v[0] = s;
    };
    for (int64_t n : ns) c.flops += 2.0 * double(n);
    c.bytes = tensor_bytes(c.t);
    return c;
}

Case sum_squares_case(std::vector<std::pair<DT, int64_t>> bufs, uint32_t seed) {
    std::vector<Tensor> in;
    for (auto& [dt, n] : bufs)
        in.push_back(input("buf" + std::to_string(in.size()), dt, n, seed + uint32_t(in.size())));
    return sum_squares_case(std::move(in));
}

// Gradient clipping to norm 1: sum_squares, scale every buffer by 1/sqrt of it, sum_squares again.
Case clip_case(uint32_t seed) {
    Case c;
    c.op = "sum_squares";
    c.covers = {"sum_squares", "scale"};
    c.shape = "200000 f32 + 1000 bf16 + 10 f32 (3.0), clipped to norm 1 by scale";
    c.dtypes = "bf16,f32";
    c.t = {input("a", DT::F32, 200000, seed), input("b", DT::BF16, 1000, seed + 1),
           input_values("c", DT::F32, std::vector<double>(10, 3.0))};
    // The factor is float(1/sqrt(ss)): an ulp of ss may move it an ulp (2^-24), and the bf16 buffer's
    // elements then round differently: relative 1e-6 on the norm is far above both.
    Tensor r = output("norm2 after clipping", DT::F64, 1, Tol{1e-12, 0.0, "float factor (2^-24) and bf16 re-rounding"});
    r.host = true;
    c.t.push_back(r);
    c.run = [](Backend& be, Bufs& b) {
        const std::vector<BufferRef> refs{
            {ConstTensorRef(b.ref(0)), 200000}, {ConstTensorRef(b.ref(1)), 1000}, {ConstTensorRef(b.ref(2)), 10}};
        const float factor = float(1.0 / std::sqrt(be.sum_squares(refs)));
        be.scale(b.ref(0), factor, 200000);
        be.scale(b.ref(1), factor, 1000);
        be.scale(b.ref(2), factor, 10);
        b.host(3)[0] = be.sum_squares(refs);
    };
    c.ref = [](std::vector<Tensor>& t) {
        double ss = 0.0;
        for (size_t i = 0; i < 3; ++i)
            for (double x : t[i].v) ss += x * x;
        const float factor = float(1.0 / std::sqrt(ss));
        double after = 0.0;
        for (size_t i = 0; i < 3; ++i)
            for (double x : t[i].v) {
                const double y = round_to(t[i].dt, float(x) * factor);
                after += y * y;
            }
        t[3].v[0] = after;
    };
    return c;
}

Case dot_accumulate_case(int64_t rows, int64_t cols, int64_t ld, float alpha, uint32_t seed) {
    Case c;
    c.op = "dot_accumulate";
    c.shape = label("rows%lld cols%lld ld%lld alpha %g", (long long)rows, (long long)cols, (long long)ld, alpha);
    c.dtypes = "f32";
    c.t = {input("a", DT::F32, rows * ld, seed), input("b", DT::F32, rows * ld, seed + 1),
           output_values("out", DT::F32, {0.75},
                         Tol{4.0 * std::pow((1.0 + 8.0 * std::sqrt(double(rows * cols))) * std::ldexp(1.0, -24), 2),
                             1e-6 * std::sqrt(double(rows * cols)),
                             "f32 result of a sum of rows·cols products: 4(u + 8·sqrt(k)·u)^2; atol 1e-6·sqrt(k) "
                             "for a sum near 0"})};
    c.run = [=](Backend& be, Bufs& b) {
        be.dot_accumulate(b.at<float>(2), b.at<float>(0), b.at<float>(1), rows, cols, ld, alpha);
    };
    c.ref = [=](std::vector<Tensor>& t) {
        double s = 0.0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < cols; ++j) s += t[0].v[size_t(r * ld + j)] * t[1].v[size_t(r * ld + j)];
        t[2].v[0] += double(alpha) * s;
    };
    c.flops = 2.0 * double(rows * cols);
    c.bytes = 2.0 * 4.0 * double(rows * cols);
    return c;
}

Case init_normal_case(int64_t n, DT dt, uint64_t seed, uint32_t tensor, float std) {
    Case c;
    c.op = "init_normal";
    c.shape = label("n%lld seed %llu tensor %u std %g", (long long)n, (unsigned long long)seed, tensor, std);
    c.dtypes = dt_name(dt);
    // The definition (kernels/common/init_math.h) evaluated on the host; a device's logf / cosf may
    // differ by an ulp: relative 2^-22 in fp32, one bf16 ulp in a few elements per million.
    c.t = {output("x", dt, n, Tol{dt == DT::BF16 ? 1e-8 : 1e-12, 0.0, "Philox definition; device libm within 4 ulp"})};
    c.run = [=](Backend& be, Bufs& b) { be.init_normal(b.ref(0), n, seed, tensor, std); };
    c.ref = [=](std::vector<Tensor>& t) {
        for (int64_t i = 0; i < n; ++i)
            t[0].v[size_t(i)] = round_to(dt, init_normal_value(seed, tensor, uint64_t(i), std));
    };
    c.flops = 30.0 * double(n);
    c.bytes = tensor_bytes(c.t);
    return c;
}

}  // namespace

void add_elementwise_cases(std::vector<Case>& out, const TableOptions& o) {
    if (o.perf) {
        // The shape set's activations (the paper's: 64 x 128 tokens x 4096, full size on the CPU too) and
        // a d_ff x d_model weight.
        const PerfDims d = perf_dims(o);
        const int64_t n = d.elementwise_n;
        out.push_back(residual_case(n, 1));
        out.push_back(accumulate_case(n, DT::F32, DT::BF16, 2));
        out.push_back(scale_case(n, DT::F32, 0.5f, 3));
        out.push_back(zero_case(n, DT::BF16, 4));
        out.push_back(convert_case(n, DT::BF16, DT::F32, 5));
        out.push_back(sum_squares_case({{DT::F32, n}, {DT::BF16, n}}, 6));
        out.push_back(dot_accumulate_case(d.d_ff, d.d_model, d.d_model, 1.0f, 7));
        out.push_back(init_normal_case(d.init_n, DT::BF16, 1, 2, 0.02f));
        return;
    }
    out.push_back(residual_case(1003, 1));
    out.push_back(residual_case(1, 2));
    // 1 + 2^-9 rounds to 1 (half an ulp below), 256 + 1 ties to even (256)
    out.push_back(residual_case(input_values("a", DT::BF16, {1.0, 256.0}),
                                input_values("b", DT::BF16, {1.0 / 512, 1.0}), false,
                                " values: 1 + 2^-9 -> 1, 256 + 1 -> 256 (ties to even)"));
    out.push_back(
        residual_case(input("a", DT::BF16, 517, 3, -4, 4), input("b", DT::BF16, 517, 4), true, " out aliases a"));
    for (DT d : {DT::BF16, DT::F32})
        for (DT s : {DT::BF16, DT::F32}) out.push_back(accumulate_case(517, d, s, 3));
    out.push_back(scale_case(517, DT::BF16, 0.3f, 4));
    out.push_back(scale_case(517, DT::F32, -1.7f, 5));
    out.push_back(zero_case(517, DT::BF16, 6));
    out.push_back(zero_case(1, DT::F32, 7));
    for (DT d : {DT::BF16, DT::F32})
        for (DT s : {DT::BF16, DT::F32}) out.push_back(convert_case(517, d, s, 8));
    out.push_back(sum_squares_case({{DT::F32, 200000}, {DT::BF16, 1000}, {DT::F32, 10}}, 9));
    out.push_back(sum_squares_case({{DT::BF16, 1}, {DT::F32, 0}}, 10));
    out.push_back(sum_squares_case({input_values("bad", DT::F32, {1.0, INFINITY})}, " holding inf: propagates"));
    out.push_back(clip_case(14));
    out.push_back(dot_accumulate_case(33, 65, 65, 1.0f, 11));
    out.push_back(dot_accumulate_case(17, 30, 37, -0.5f, 12));  // ld > cols
    out.push_back(dot_accumulate_case(1, 1, 1, 2.0f, 13));
    out.push_back(init_normal_case(1003, DT::F32, 7, 3, 1.0f));
    out.push_back(init_normal_case(1003, DT::BF16, 7, 4, 0.02f));
    // The CUDA kernels' cases (the removed test_dense_ops.cpp of tests/gpu and test_init.cpp before): many blocks
    // and an odd tail, a null buffer among five, big windows of dot_accumulate, the model's draws.
    out.push_back(residual_case(100003, 20));
    for (DT d : {DT::BF16, DT::F32})
        for (DT s : {DT::BF16, DT::F32}) out.push_back(accumulate_case(100003, d, s, 21));
    out.push_back(scale_case(100003, DT::BF16, 0.37f, 22));
    out.push_back(convert_case(100003, DT::BF16, DT::F32, 23));
    out.push_back(zero_case(100003, DT::F32, 24));
    out.push_back(
        sum_squares_case({{DT::F32, 300001}, {DT::BF16, 99999}, {DT::F32, 17}, {DT::F32, 0}, {DT::F32, 1 << 18}}, 25));
    out.push_back(dot_accumulate_case(300, 257, 384, 2.0f, 26));
    out.push_back(dot_accumulate_case(600, 1000, 1024, 2.0f, 27));
    out.push_back(init_normal_case(int64_t(1) << 22, DT::BF16, 42, 7, 0.02f));
    out.push_back(init_normal_case(1000003, DT::BF16, 42, 7, 0.02f));  // odd length, unaligned tail
    out.push_back(init_normal_case(100003, DT::F32, 9, 3, 1.0f));
    {
        Case c = dot_accumulate_case(7, 13, 13, 2.0f, 28);
        c.misalign_bytes = 4;  // the output float 4- but not 16-byte aligned
        c.shape += " 4-byte aligned";
        out.push_back(std::move(c));
    }
    {  // a leading dimension smaller than the window: refused
        Case c = dot_accumulate_case(2, 4, 4, 1.0f, 29);
        c.shape = "rows2 cols4 ld3 (ld < cols): throws";
        c.expect_error = true;
        c.run = [](Backend& be, Bufs& b) {
            be.dot_accumulate(b.at<float>(2), b.at<float>(0), b.at<float>(1), 2, 4, 3, 1.0f);
        };
        out.push_back(std::move(c));
    }
}

}  // namespace skew::ops
