// GPU tests of the causal GQA attention (kernels/cuda/attention*.cu) against the CPU reference
// (kernels/cpu/attention.cpp): the tensor-core kernels at head_dim 16, 32, 64 and 128, grouped KV
// heads (1, 4 and 8 query heads per KV head, and MHA), sequence lengths 1, across and not a
// multiple of the 64-row tile, the paper's shape (64 x 128, 32/8 heads of 128) and a long context;
// the CUDA-core fallback (pointers 4- but not 16-byte aligned). Inputs are fresh random values per case;
// outputs are poisoned with NaN before each call, so an element a kernel leaves unwritten fails
// the comparison (the normalized MSE propagates NaN). Outputs and gradients are bf16: normalized
// MSE <= 1e-4; lse fp32: 1e-10. Row 0 of every sequence sees one key: its dq row is exactly 0.
#include <cstring>

#include "kernels/cuda/attention.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Fill a device buffer with 0xff bytes: NaN in bf16 and fp32.
template <class T>
void poison(Dev<T>& d) {
    cuda_check(cudaMemset(d.p, 0xff, std::max<size_t>(1, d.n) * sizeof(T)));
}

struct AttentionResults {
    std::vector<bf16> out, dq, dk, dv;
    std::vector<float> lse;
};

// Run forward and backward on the GPU with the inputs starting `offset` elements into their
// buffers (offset 2, 4 bytes, breaks the 16-byte alignment and selects the CUDA-core fallback,
// which reads 4-byte words). The backward
// runs from the CPU's out and lse (given), so forward and backward are compared separately.
AttentionResults run_gpu(const AttentionShape& s, const std::vector<bf16>& q, const std::vector<bf16>& k,
                         const std::vector<bf16>& v, const std::vector<bf16>& dout, const std::vector<bf16>& cpu_out,
                         const std::vector<float>& cpu_lse, size_t offset, bool expect_tensor_cores) {
    auto padded = [&](const std::vector<bf16>& x) {
        std::vector<bf16> p(offset, bf16{0});
        p.insert(p.end(), x.begin(), x.end());
        return p;
    };
    const size_t nq = q.size(), nkv = k.size(), nl = cpu_lse.size();
    Dev<bf16> gq(padded(q)), gk(padded(k)), gv(padded(v)), gdout(padded(dout)), gcout(padded(cpu_out));
    Dev<bf16> gout(offset + nq), gdq(offset + nq), gdk(offset + nkv), gdv(offset + nkv);
    Dev<float> glse(nl), gclse(cpu_lse);
    for (auto* d : {&gout, &gdq, &gdk, &gdv}) poison(*d);
    poison(glse);
    REQUIRE(cuda::attention_uses_tensor_cores(gq.p + offset, gk.p + offset, gv.p + offset, gout.p + offset, s) ==
            expect_tensor_cores);
    gpu().attention_forward(gout.p + offset, glse.p, gq.p + offset, gk.p + offset, gv.p + offset, s);
    gpu().attention_backward(gdq.p + offset, gdk.p + offset, gdv.p + offset, gdout.p + offset, gq.p + offset,
                             gk.p + offset, gv.p + offset, gcout.p + offset, gclse.p, s);
    auto unpad = [&](const Dev<bf16>& d) {
        auto h = d.get();
        return std::vector<bf16>(h.begin() + std::ptrdiff_t(offset), h.end());
    };
    return {unpad(gout), unpad(gdq), unpad(gdk), unpad(gdv), glse.get()};
}

void check_attention(const AttentionShape& s, uint32_t seed, size_t offset = 0) {
    auto cpu = cpu_backend();
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim;
    const int64_t nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    const int64_t nl = s.batch * s.n_heads * s.seq_len;
    const auto q = to_bf16(random_normal(nq, seed)), k = to_bf16(random_normal(nkv, seed + 1));
    const auto v = random_bf16(nkv, seed + 2), dout = random_bf16(nq, seed + 3);
    std::vector<bf16> out(static_cast<size_t>(nq)), dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)),
        dv(static_cast<size_t>(nkv));
    std::vector<float> lse(static_cast<size_t>(nl));
    cpu->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    cpu->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s);
    const auto g = run_gpu(s, q, k, v, dout, out, lse, offset, offset == 0);
    INFO("B " << s.batch << " T " << s.seq_len << " H " << s.n_heads << " KV " << s.n_kv_heads << " D " << s.head_dim
              << (offset ? " (CUDA-core fallback)" : " (tensor cores)"));
    require_close("attention out", g.out, out, 1e-4);
    require_close("attention lse", g.lse, lse, 1e-10);
    require_close("attention dq", g.dq, dq, 1e-4);
    require_close("attention dk", g.dk, dk, 1e-4);
    require_close("attention dv", g.dv, dv, 1e-4);
    // Row 0 sees one key (softmax constant): dS = 0 exactly, so dq row 0 is exactly 0.
    for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t i = 0; i < s.n_heads * s.head_dim; ++i)
            REQUIRE((g.dq[static_cast<size_t>(b * s.seq_len * s.n_heads * s.head_dim + i)].bits & 0x7fffu) == 0);
    if (s.seq_len == 1)  // and at T = 1 dk too (the CPU's dq and dk are exactly 0)
        for (const bf16 x : g.dk) REQUIRE((x.bits & 0x7fffu) == 0);
}

}  // namespace

TEST_CASE("gpu attention matches the CPU for head_dim 64 with 4 query heads per KV head") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 77, 8, 2, 64}, 1);
}

TEST_CASE("gpu attention at T = 1 gives exactly zero dq and dk (head_dim 64, 2 query heads per KV head)") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{1, 1, 2, 1, 64}, 31);
    check_attention(AttentionShape{3, 1, 8, 1, 128}, 32);
}

TEST_CASE("gpu attention matches the CPU for head_dim 128 (the paper's) and plain MHA") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{1, 130, 4, 1, 128}, 11);
    check_attention(AttentionShape{2, 32, 2, 2, 128}, 21);
    check_attention(AttentionShape{1, 200, 4, 4, 64}, 22);
}

TEST_CASE("gpu attention matches the CPU with 8 query heads per KV head, T not a multiple of the tile") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 100, 16, 2, 128}, 61);
    check_attention(AttentionShape{1, 65, 8, 1, 64}, 62);
}

TEST_CASE("gpu attention matches the CPU for the small head dims of tiny.yaml (16) and quickstart.yaml (32)") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 32, 4, 2, 16}, 41);
    check_attention(AttentionShape{1, 45, 4, 4, 32}, 51);
    check_attention(AttentionShape{2, 128, 4, 2, 32}, 52);
}

TEST_CASE("gpu attention matches the CPU at the paper's shape (64 x 128, 32/8 heads of 128)") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{64, 128, 32, 8, 128}, 71);
}

TEST_CASE("gpu attention matches the CPU at a long context (T 1024, 4 query heads per KV head)") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{1, 1024, 8, 2, 128}, 81);
}

TEST_CASE("gpu attention falls back to the CUDA-core kernels for unaligned pointers, with the same results") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 77, 8, 2, 64}, 91, 2);
    check_attention(AttentionShape{1, 1, 2, 1, 64}, 92, 2);
    check_attention(AttentionShape{1, 45, 4, 4, 32}, 93, 2);
    // batch x heads past grid.y's 65,535 (70,000 x 2 query heads, 70,000 x 1 key/value heads): the
    // fallback's flat grid
    check_attention(AttentionShape{70000, 2, 2, 1, 16}, 94, 2);
}

TEST_CASE("gpu attention backward is deterministic (no atomics): two runs agree bit for bit") {
    SKEW_REQUIRE_GPU();
    const AttentionShape s{2, 150, 8, 2, 128};
    auto cpu = cpu_backend();
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim;
    const int64_t nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    const auto q = to_bf16(random_normal(nq, 101)), k = to_bf16(random_normal(nkv, 102));
    const auto v = random_bf16(nkv, 103), dout = random_bf16(nq, 104);
    std::vector<bf16> out(static_cast<size_t>(nq));
    std::vector<float> lse(static_cast<size_t>(s.batch * s.n_heads * s.seq_len));
    cpu->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    const auto a = run_gpu(s, q, k, v, dout, out, lse, 0, true);
    const auto b = run_gpu(s, q, k, v, dout, out, lse, 0, true);
    REQUIRE(std::memcmp(a.dq.data(), b.dq.data(), a.dq.size() * 2) == 0);
    REQUIRE(std::memcmp(a.dk.data(), b.dk.data(), a.dk.size() * 2) == 0);
    REQUIRE(std::memcmp(a.dv.data(), b.dv.data(), a.dv.size() * 2) == 0);
    REQUIRE(std::memcmp(a.out.data(), b.out.data(), a.out.size() * 2) == 0);
}

TEST_CASE("gpu attention rejects a head_dim it has no kernel for") {
    SKEW_REQUIRE_GPU();
    CHECK_THROWS_AS(gpu().attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, AttentionShape{1, 4, 2, 1, 96}),
                    skew::Error);
}
