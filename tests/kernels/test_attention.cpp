// Tests of causal GQA attention (kernels/cpu/attention.cpp): the forward against a double
// reference (within one block of query rows and across blocks), causality, the grouped (not tiled) KV-head mapping with K/V gradients summed over the
// group, gradients to q, k, v against finite differences, and the bf16 path against fp32.
#include "kernels/cpu/cpu_ops.h"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Reference in double: query head h reads KV head kv_of(h).
std::vector<double> ref_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                  const AttentionShape& s, bool tiled) {
    const int64_t B = s.batch, T = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    std::vector<double> out(size_t(B * T * H * D), 0.0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = tiled ? h % KV : h / (H / KV);
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> sc(size_t(t + 1));
                double mx = -1e300, sum = 0.0;
                for (int64_t j = 0; j <= t; ++j) {
                    double d = 0.0;
                    for (int64_t c = 0; c < D; ++c)
                        d += double(q[size_t(((b * T + t) * H + h) * D + c)]) *
                             k[size_t(((b * T + j) * KV + g) * D + c)];
                    sc[size_t(j)] = d / std::sqrt(double(D));
                    mx = std::max(mx, sc[size_t(j)]);
                }
                for (auto& x : sc) sum += (x = std::exp(x - mx));
                for (int64_t j = 0; j <= t; ++j)
                    for (int64_t c = 0; c < D; ++c)
                        out[size_t(((b * T + t) * H + h) * D + c)] +=
                            sc[size_t(j)] / sum * v[size_t(((b * T + j) * KV + g) * D + c)];
            }
        }
    return out;
}

}  // namespace

TEST_CASE("attention matches a double reference with query head h reading KV head h / (n_heads / n_kv_heads)") {
    const AttentionShape s{2, 5, 4, 2, 3};
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim,
                  nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    const auto q = random_vector(nq, 1, -2.0f, 2.0f), k = random_vector(nkv, 2, -2.0f, 2.0f), v = random_vector(nkv, 3);
    std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.batch * s.n_heads * s.seq_len));
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    const auto grouped = ref_attention(q, k, v, s, false), tiled = ref_attention(q, k, v, s, true);
    const double max_err = max_abs_diff<float, double>(out, grouped), max_tiled = max_abs_diff<float, double>(out, tiled);
    INFO("max |out - grouped ref| " << max_err << ", max |out - tiled ref| " << max_tiled);
    REQUIRE(count_nonfinite<float>(out) == 0);
    REQUIRE(max_err < 1e-5);
    REQUIRE(max_tiled > 1e-2);  // heads 1 and 2 would read the other KV head if tiled
}

TEST_CASE("attention over more positions than one block of query rows matches the double reference") {
    // 150 positions: query blocks of 64, 64 and 22 rows, keys up to each block's last row
    const AttentionShape s{1, 150, 2, 1, 8};
    const int64_t nq = s.seq_len * s.n_heads * s.head_dim, nkv = s.seq_len * s.head_dim;
    const auto q = random_vector(nq, 21, -2.0f, 2.0f), k = random_vector(nkv, 22, -2.0f, 2.0f), v = random_vector(nkv, 23);
    std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.n_heads * s.seq_len));
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    const double max_err = max_abs_diff<float, double>(out, ref_attention(q, k, v, s, false));
    INFO("max |out - ref| " << max_err);
    REQUIRE(max_err < 1e-5);
}

TEST_CASE("attention gradients across query blocks match finite differences") {
    const AttentionShape s{1, 70, 2, 1, 2};  // blocks of 64 and 6 rows
    const int64_t nq = s.seq_len * s.n_heads * s.head_dim, nkv = s.seq_len * s.head_dim;
    auto q = random_vector(nq, 24), k = random_vector(nkv, 25), v = random_vector(nkv, 26);
    const auto r = random_vector(nq, 27);
    auto loss = [&] {
        std::vector<float> out(static_cast<size_t>(nq));
        cpu::attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), s);
        return dot(out, r);
    };
    std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.n_heads * s.seq_len));
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    std::vector<float> dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)), dv(static_cast<size_t>(nkv));
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s);
    // as above: fp32 forward, eps 1e-2 on O(1) inputs
    check_gradient("dq", dq, fd_gradient(q, loss, 1e-2f), 5e-4, 1e-2);
    check_gradient("dk", dk, fd_gradient(k, loss, 1e-2f), 5e-4, 1e-2);
    check_gradient("dv", dv, fd_gradient(v, loss, 1e-2f), 5e-4, 1e-2);
}

TEST_CASE("attention is causal: a position never reads later keys or values") {
    const AttentionShape s{1, 6, 2, 1, 4};
    const int64_t nq = s.seq_len * s.n_heads * s.head_dim, nkv = s.seq_len * s.head_dim;
    const auto q = random_vector(nq, 4);
    auto k = random_vector(nkv, 5), v = random_vector(nkv, 6);
    std::vector<float> out1(static_cast<size_t>(nq)), out2(static_cast<size_t>(nq));
    cpu::attention_forward(out1.data(), nullptr, q.data(), k.data(), v.data(), s);
    for (int64_t i = 3 * s.head_dim; i < nkv; ++i) k[size_t(i)] = v[size_t(i)] = 100.0f;  // positions 3..5
    cpu::attention_forward(out2.data(), nullptr, q.data(), k.data(), v.data(), s);
    for (int64_t i = 0; i < 3 * s.n_heads * s.head_dim; ++i) REQUIRE(out1[size_t(i)] == out2[size_t(i)]);
}

TEST_CASE("attention gradients match finite differences and K/V gradients sum over the query group") {
    const AttentionShape s{2, 4, 4, 2, 3};
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim,
                  nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    auto q = random_vector(nq, 7), k = random_vector(nkv, 8), v = random_vector(nkv, 9);
    const auto r = random_vector(nq, 10);
    auto loss = [&] {
        std::vector<float> out(static_cast<size_t>(nq));
        cpu::attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), s);
        return dot(out, r);
    };
    std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.batch * s.n_heads * s.seq_len));
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    std::vector<float> dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)), dv(static_cast<size_t>(nkv));
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s);
    // fp32 forward, eps 1e-2 on O(1) inputs: truncation ~1e-5, rounding ~5e-5
    check_gradient("dq", dq, fd_gradient(q, loss, 1e-2f), 5e-4, 1e-2);
    check_gradient("dk", dk, fd_gradient(k, loss, 1e-2f), 5e-4, 1e-2);
    check_gradient("dv", dv, fd_gradient(v, loss, 1e-2f), 5e-4, 1e-2);

    // The same problem as multi-head attention with every KV head copied to its query heads
    // (h -> h / group): dk/dv of GQA equal the sum of the copies' gradients over each group.
    const AttentionShape m{s.batch, s.seq_len, s.n_heads, s.n_heads, s.head_dim};
    const int64_t group = s.n_heads / s.n_kv_heads, D = s.head_dim;
    std::vector<float> ke(static_cast<size_t>(nq)), ve(static_cast<size_t>(nq));
    for (int64_t bt = 0; bt < s.batch * s.seq_len; ++bt)
        for (int64_t h = 0; h < s.n_heads; ++h)
            for (int64_t c = 0; c < D; ++c) {
                ke[size_t((bt * s.n_heads + h) * D + c)] = k[size_t((bt * s.n_kv_heads + h / group) * D + c)];
                ve[size_t((bt * s.n_heads + h) * D + c)] = v[size_t((bt * s.n_kv_heads + h / group) * D + c)];
            }
    std::vector<float> oute(static_cast<size_t>(nq)), lsee(lse.size()), dqe(static_cast<size_t>(nq)),
        dke(static_cast<size_t>(nq)), dve(static_cast<size_t>(nq));
    cpu::attention_forward(oute.data(), lsee.data(), q.data(), ke.data(), ve.data(), m);
    cpu::attention_backward(dqe.data(), dke.data(), dve.data(), r.data(), q.data(), ke.data(), ve.data(), oute.data(),
                            lsee.data(), m);
    for (int64_t bt = 0; bt < s.batch * s.seq_len; ++bt)
        for (int64_t g = 0; g < s.n_kv_heads; ++g)
            for (int64_t c = 0; c < D; ++c) {
                double sk = 0.0, sv = 0.0;
                for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                    sk += dke[size_t((bt * s.n_heads + h) * D + c)];
                    sv += dve[size_t((bt * s.n_heads + h) * D + c)];
                }
                REQUIRE(dk[size_t((bt * s.n_kv_heads + g) * D + c)] == Approx(sk).margin(1e-6));
                REQUIRE(dv[size_t((bt * s.n_kv_heads + g) * D + c)] == Approx(sv).margin(1e-6));
            }
    for (size_t i = 0; i < dq.size(); ++i) REQUIRE(dq[i] == Approx(dqe[i]).margin(1e-6));
}

TEST_CASE("attention in bf16 matches the fp32 path") {
    auto be = make_cpu_backend();
    const AttentionShape s{2, 16, 4, 2, 8};
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim,
                  nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    const auto q = round_to_bf16(random_vector(nq, 11)), k = round_to_bf16(random_vector(nkv, 12)),
               v = round_to_bf16(random_vector(nkv, 13)), g = round_to_bf16(random_vector(nq, 14));
    std::vector<float> out(static_cast<size_t>(nq)), lse(size_t(s.batch * s.n_heads * s.seq_len));
    std::vector<float> dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)), dv(static_cast<size_t>(nkv));
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s);
    const auto q16 = to_bf16(q), k16 = to_bf16(k), v16 = to_bf16(v), g16 = to_bf16(g);
    std::vector<bf16> out16(static_cast<size_t>(nq)), dq16(static_cast<size_t>(nq)), dk16(static_cast<size_t>(nkv)),
        dv16(static_cast<size_t>(nkv));
    std::vector<float> lse16(lse.size());
    be->attention_forward(out16.data(), lse16.data(), q16.data(), k16.data(), v16.data(), s);
    be->attention_backward(dq16.data(), dk16.data(), dv16.data(), g16.data(), q16.data(), k16.data(), v16.data(),
                           out16.data(), lse16.data(), s);
    // same math on the same (bf16-exact) inputs; outputs rounded once to bf16: NMSE <= 2^-16
    require_nmse("out", to_f32(out16), out, 2e-5);
    require_nmse("lse", lse16, lse, 1e-12);
    require_nmse("dq", to_f32(dq16), dq, 2e-5);
    require_nmse("dk", to_f32(dk16), dk, 2e-5);
    require_nmse("dv", to_f32(dv16), dv, 2e-5);
    REQUIRE_THROWS_AS(be->attention_forward(out16.data(), lse16.data(), q16.data(), k16.data(), v16.data(),
                                            AttentionShape{2, 16, 4, 3, 8}),
                      Error);
}
