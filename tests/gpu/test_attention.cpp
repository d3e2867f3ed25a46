// GPU tests of the flash-style causal GQA attention against the CPU reference: head_dim 16, 32,
// 64 and 128, grouped KV heads (4 query heads per KV head, and 1), sequence lengths that are not a
// multiple of the 32-row tile. Outputs and gradients are bf16: normalized MSE <= 1e-4.
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

void check_attention(const AttentionShape& s, uint32_t seed) {
    auto cpu = cpu_backend();
    const int64_t nq = s.batch * s.seq_len * s.n_heads * s.head_dim;
    const int64_t nkv = s.batch * s.seq_len * s.n_kv_heads * s.head_dim;
    const int64_t nl = s.batch * s.n_heads * s.seq_len;
    const auto q = to_bf16(random_normal(nq, seed)), k = to_bf16(random_normal(nkv, seed + 1));
    const auto v = random_bf16(nkv, seed + 2), dout = random_bf16(nq, seed + 3);
    std::vector<bf16> out(static_cast<size_t>(nq)), dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)), dv(static_cast<size_t>(nkv));
    std::vector<float> lse(static_cast<size_t>(nl));
    Dev<bf16> gq(q), gk(k), gv(v), gdout(dout), gout(static_cast<size_t>(nq)), gdq(static_cast<size_t>(nq)), gdk(static_cast<size_t>(nkv)), gdv(static_cast<size_t>(nkv));
    Dev<float> glse(static_cast<size_t>(nl));
    cpu->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    gpu().attention_forward(gout.p, glse.p, gq.p, gk.p, gv.p, s);
    INFO("B " << s.batch << " T " << s.seq_len << " H " << s.n_heads << " KV " << s.n_kv_heads << " D " << s.head_dim);
    require_close("attention out", gout.get(), out, 1e-4);
    require_close("attention lse", glse.get(), lse, 1e-10);
    // Backward from the CPU's out and lse on both sides.
    Dev<bf16> cout_(out);
    Dev<float> clse(lse);
    cpu->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                            lse.data(), s);
    gpu().attention_backward(gdq.p, gdk.p, gdv.p, gdout.p, gq.p, gk.p, gv.p, cout_.p, clse.p, s);
    require_close("attention dq", gdq.get(), dq, 1e-4);
    require_close("attention dk", gdk.get(), dk, 1e-4);
    require_close("attention dv", gdv.get(), dv, 1e-4);
}

}  // namespace

TEST_CASE("gpu attention matches the CPU for head_dim 64 with 4 query heads per KV head") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 77, 8, 2, 64}, 1);
}

TEST_CASE("gpu attention matches the CPU for head_dim 128 (the paper's) and plain MHA") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{1, 130, 4, 1, 128}, 11);
    check_attention(AttentionShape{2, 32, 2, 2, 128}, 21);
    check_attention(AttentionShape{1, 1, 2, 1, 64}, 31);
}

TEST_CASE("gpu attention matches the CPU for the small head dims of tiny.yaml (16) and 32") {
    SKEW_REQUIRE_GPU();
    check_attention(AttentionShape{2, 32, 4, 2, 16}, 41);
    check_attention(AttentionShape{1, 45, 4, 4, 32}, 51);
}

TEST_CASE("gpu attention rejects a head_dim it has no kernel for") {
    SKEW_REQUIRE_GPU();
    CHECK_THROWS_AS(gpu().attention_forward(nullptr, nullptr, nullptr, nullptr, nullptr, AttentionShape{1, 4, 2, 1, 96}),
                    skew::Error);
}
