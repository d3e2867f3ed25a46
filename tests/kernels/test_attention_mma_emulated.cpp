// The tensor-core attention kernels (kernels/cuda/attention_mma.cuh) run on the CPU through the
// warp emulation of tests/kernels/warp_emulator.h (ldmatrix and mma.sync fragment layouts from the
// PTX ISA) and compared with the CPU twin (kernels/cpu/attention.cpp): catches indexing, tiling,
// masking, online-softmax, GQA-mapping and pipelining errors of the kernels on a machine with no
// GPU. Not covered here: the hardware's own behaviour (the GPU tests in tests/gpu do that).
// Key tiles 64 and 32 of the forward and dQ kernels. Shapes: T = 1 (dq, dk exactly 0), T across the 64-row tile, T over four tiles (buffers reused), head_dim 16, 32, 64 and 128, GQA
// ratios 1, 4 and 8; the forward of a KV-cache step (kv_len > T: one or a few query rows at the end
// of kv_len positions). Limits as the GPU tests: normalized MSE <= 1e-4 (bf16 outputs).
#include "tests/kernels/warp_emulator.h"

namespace skew::cuda::attention_mma {
alignas(16) unsigned char smem_raw[skew::emu::kSmemBytes];  // the kernels' extern __shared__ array
}

#include "kernels/cuda/attention_mma.cuh"
#include "tests/kernels/harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// bf16 inputs with every element NaN-poisoned outputs, the emulated kernels' results, and the CPU
// twin's; the backward of both runs from the CPU's out and lse (kv_len = T only: a KV-cache step
// has no backward).
void check_emulated_with(const AttentionShape& s, uint32_t seed, int key_tile) {
    namespace am = skew::cuda::attention_mma;
    emu::smem = am::smem_raw;
    const int64_t B = s.batch, T = s.seq_len, Tk = s.keys(), H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const bool backward = Tk == T;
    const int64_t nq = B * T * H * D, nkv = B * Tk * KV * D, nl = B * H * T;
    const auto q = to_bf16(random_normal(nq, seed)), k = to_bf16(random_normal(nkv, seed + 1));
    const auto v = to_bf16(random_vector(nkv, seed + 2)), dout = to_bf16(random_vector(nq, seed + 3));
    auto cpu = cpu_backend();
    std::vector<bf16> out(static_cast<size_t>(nq)), dq(static_cast<size_t>(nq)), dk(static_cast<size_t>(nkv)),
        dv(static_cast<size_t>(nkv));
    std::vector<float> lse(static_cast<size_t>(nl));
    cpu->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    if (backward)
        cpu->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), out.data(),
                                lse.data(), s);

    const bf16 poison{0x7fc1};  // a NaN: an element the kernels leave unwritten fails the comparison
    std::vector<bf16> e_out(static_cast<size_t>(nq), poison), e_dq(static_cast<size_t>(nq), poison),
        e_dk(static_cast<size_t>(nkv), poison), e_dv(static_cast<size_t>(nkv), poison);
    std::vector<float> e_lse(static_cast<size_t>(nl), NAN), dvec(static_cast<size_t>(nl));
    for (int64_t b = 0; b < B; ++b)  // D = <dout, out> per row, as attention.cu forms it
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h) {
                float acc = 0.0f;
                for (int64_t d = 0; d < D; ++d) {
                    const size_t i = size_t(((b * T + t) * H + h) * D + d);
                    acc += bf16_to_f32(dout[i]) * bf16_to_f32(out[i]);
                }
                dvec[size_t((b * H + h) * T + t)] = acc;
            }
    const float scale = 1.0f / std::sqrt(float(D)), sl2 = scale * am::kLog2e;
    const int Ti = int(T), Tki = int(Tk), Hi = int(H), KVi = int(KV);
    const unsigned q_tiles = unsigned((T + am::kTileM - 1) / am::kTileM),
                   k_tiles = unsigned((T + am::kTileN - 1) / am::kTileN);
    auto run = [&]<int DD, int KN>() {
        emu::launch(unsigned(B * H), q_tiles, am::kThreads, [&] {
            am::attention_forward_mma_kernel<DD, KN>(e_out.data(), e_lse.data(), q.data(), k.data(), v.data(), Ti, Tki,
                                                     Hi, KVi, scale, sl2);
        });
        if (!backward) return;
        emu::launch(unsigned(B * KV), k_tiles, am::kThreads, [&] {
            am::attention_backward_dkdv_mma_kernel<DD>(e_dk.data(), e_dv.data(), dout.data(), q.data(), k.data(),
                                                       v.data(), lse.data(), dvec.data(), Ti, Hi, KVi, scale, sl2);
        });
        emu::launch(unsigned(B * H), q_tiles, am::kThreads, [&] {
            am::attention_backward_dq_mma_kernel<DD, KN>(e_dq.data(), dout.data(), q.data(), k.data(), v.data(),
                                                         lse.data(), dvec.data(), Ti, Hi, KVi, scale, sl2);
        });
    };
    auto run_tile = [&]<int DD>() {
        if (key_tile == 32) run.template operator()<DD, 32>();
        else run.template operator()<DD, 64>();
    };
    switch (D) {
        case 16: run_tile.template operator()<16>(); break;
        case 32: run_tile.template operator()<32>(); break;
        case 64: run_tile.template operator()<64>(); break;
        case 128: run_tile.template operator()<128>(); break;
        default: FAIL("head_dim " << D << " has no tensor-core kernel");
    }
    INFO("B " << B << " T " << T << " kv_len " << Tk << " H " << H << " KV " << KV << " D " << D << " key tile "
              << key_tile);
    require_nmse("emulated attention out", to_f32(e_out), to_f32(out), 1e-4);
    require_nmse("emulated attention lse", e_lse, lse, 1e-10);
    if (!backward) return;
    require_nmse("emulated attention dq", to_f32(e_dq), to_f32(dq), 1e-4);
    require_nmse("emulated attention dk", to_f32(e_dk), to_f32(dk), 1e-4);
    require_nmse("emulated attention dv", to_f32(e_dv), to_f32(dv), 1e-4);
    // Row 0 sees one key: its dS is exactly 0, so dq row 0 is exactly 0 (and at T = 1 all of dq, dk).
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t d = 0; d < D; ++d) REQUIRE((e_dq[size_t((b * T * H + h) * D + d)].bits & 0x7fffu) == 0);
    if (T == 1)
        for (const bf16 x : e_dk) REQUIRE((x.bits & 0x7fffu) == 0);
}

// Both key tiles of the forward and dQ kernels (64, the default, and 32).
void check_emulated(const AttentionShape& s, uint32_t seed) {
    check_emulated_with(s, seed, 64);
    check_emulated_with(s, seed, 32);
}

}  // namespace

TEST_CASE("emulated tensor-core attention: T = 1 gives dq = dk = 0 exactly, head_dim 64, 2 query heads per KV head") {
    check_emulated(AttentionShape{1, 1, 2, 1, 64}, 31);
}

TEST_CASE("emulated tensor-core attention: T across the 64-row tile, head_dim 64, 4 query heads per KV head") {
    check_emulated(AttentionShape{2, 70, 4, 1, 64}, 1);
}

TEST_CASE("emulated tensor-core attention: head_dim 128 (the paper's), plain MHA, T not a multiple of 16") {
    check_emulated(AttentionShape{1, 37, 2, 2, 128}, 11);
}

TEST_CASE("emulated tensor-core attention: head_dim 16 (tiny.yaml) with 8 query heads per KV head, head_dim 32") {
    check_emulated(AttentionShape{1, 66, 8, 1, 16}, 41);
    check_emulated(AttentionShape{1, 45, 4, 2, 32}, 51);
}

TEST_CASE(
    "emulated tensor-core attention: four key tiles (the double buffers reused), head_dim 16, 2 query heads per KV "
    "head") {
    check_emulated(AttentionShape{1, 200, 2, 1, 16}, 61);
}

// A KV-cache step (model/inference.h): the last rows of kv_len positions against every cached key.
// One row past one and several 64-key tiles, a row on a tile's last key, and three rows straddling
// a 64-row query tile's mask; a key tile read from the wrong sequence or a mask at the row index
// instead of its position changes every output.
TEST_CASE("emulated tensor-core attention: a KV-cache step's rows at the end of kv_len positions") {
    check_emulated(AttentionShape{2, 1, 4, 2, 32, 150}, 71);
    check_emulated(AttentionShape{1, 1, 2, 2, 64, 64}, 81);
    check_emulated(AttentionShape{1, 3, 8, 1, 16, 130}, 91);
}
