// GPU tests of the grouped expert GEMM's two algorithms (kernels/cuda/moe_matmul.h: the per-expert
// cuBLASLt loop and one cublasGemmGroupedBatchedEx per product) against the CPU backend: forward,
// data gradient (overwrite and accumulate) and weight gradient (fp32 and bf16) at small shapes and
// at the paper's per-expert shape (4096 x 4096), with uneven routing and empty experts (an expert
// without tokens gets no gradient); and the offsets' single device-to-host copy per dispatch.
#include <random>

#include "kernels/cuda/moe_matmul.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

// Offsets of `rows` rows over E experts, Zipf-like, with every expert in `empty` given none.
std::vector<int64_t> skewed_offsets(int64_t rows, int64_t E, const std::vector<int64_t>& empty, uint32_t seed) {
    std::vector<double> w(static_cast<size_t>(E));
    std::mt19937 gen(seed);
    for (int64_t e = 0; e < E; ++e) w[static_cast<size_t>(e)] = (1.0 + double(gen() % 7)) / double(e + 1);
    for (int64_t e : empty) w[static_cast<size_t>(e)] = 0.0;
    double sum = 0.0;
    for (double x : w) sum += x;
    std::vector<int64_t> off(static_cast<size_t>(E + 1), 0);
    for (int64_t e = 0; e < E; ++e)
        off[static_cast<size_t>(e + 1)] = off[static_cast<size_t>(e)] + int64_t(double(rows) * w[static_cast<size_t>(e)] / sum);
    int64_t last = E - 1;  // the remainder to the last non-empty expert
    while (w[static_cast<size_t>(last)] == 0.0) --last;
    for (int64_t e = last; e < E; ++e) off[static_cast<size_t>(e + 1)] += rows - off[static_cast<size_t>(E)];
    return off;
}

struct AlgoGuard {  // restore the shared backend's algorithm after a test
    explicit AlgoGuard(cuda::GroupedGemmAlgo a) { gpu().grouped_matmul().set_algo(a); }
    ~AlgoGuard() { gpu().grouped_matmul().set_algo(cuda::GroupedGemmAlgo::PER_EXPERT_LOOP); }
};

// Every product of the grouped matmul on both backends; limits are normalized MSE.
void check_grouped(int64_t E, int64_t IN, int64_t OUT, const std::vector<int64_t>& off, uint32_t seed) {
    auto cpu = cpu_backend();
    const int64_t rows = off.back();
    Dev<int64_t> goff(off);
    const auto inp = random_bf16(rows * IN, seed), w = random_bf16(E * OUT * IN, seed + 1),
               dout = random_bf16(rows * OUT, seed + 2);
    Dev<bf16> ginp(inp), gw(w), gdout(dout);

    std::vector<bf16> out(static_cast<size_t>(rows * OUT));
    Dev<bf16> gout(random_bf16(rows * OUT, seed + 3));  // overwritten
    cpu->moe_matmul_forward(out.data(), inp.data(), w.data(), off.data(), E, IN, OUT);
    gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
    require_close("grouped forward", gout.get(), out, 1e-5);

    for (int acc = 0; acc < 2; ++acc) {
        INFO("accumulate dinp " << acc);
        std::vector<bf16> dinp = random_bf16(rows * IN, seed + 4);
        std::vector<float> dw = random_vector(E * OUT * IN, seed + 5, -1.0f, 1.0f);
        for (int64_t e = 0; e < E; ++e)  // empty experts' gradient starts at zero and must stay there
            if (off[static_cast<size_t>(e + 1)] == off[static_cast<size_t>(e)])
                std::fill(dw.begin() + e * OUT * IN, dw.begin() + (e + 1) * OUT * IN, 0.0f);
        Dev<bf16> gdinp(dinp);
        Dev<float> gdw(dw);
        cpu->moe_matmul_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), off.data(), E, IN, OUT, acc);
        gpu().moe_matmul_backward(gdinp.p, gdw.p, gdout.p, ginp.p, gw.p, goff.p, E, IN, OUT, acc);
        require_close("grouped dinp", gdinp.get(), dinp, 1e-5);
        const auto gdw_h = gdw.get();
        require_close("grouped dweight fp32 (accumulated)", gdw_h, dw, 1e-9);
        for (int64_t e = 0; e < E; ++e) {
            if (off[static_cast<size_t>(e + 1)] != off[static_cast<size_t>(e)]) continue;
            bool zero = true;
            for (int64_t i = e * OUT * IN; i < (e + 1) * OUT * IN; ++i) zero &= gdw_h[static_cast<size_t>(i)] == 0.0f;
            INFO("empty expert " << e);
            CHECK(zero);
        }
    }
    std::vector<bf16> dwb = random_bf16(E * OUT * IN, seed + 6);
    Dev<bf16> gdwb(dwb);
    cpu->moe_matmul_backward(nullptr, dwb.data(), dout.data(), inp.data(), w.data(), off.data(), E, IN, OUT, false);
    gpu().moe_matmul_backward(nullptr, gdwb.p, gdout.p, ginp.p, gw.p, goff.p, E, IN, OUT, false);
    require_close("grouped dweight bf16 (accumulated)", gdwb.get(), dwb, 1e-5);
}

const cuda::GroupedGemmAlgo kAlgos[] = {cuda::GroupedGemmAlgo::PER_EXPERT_LOOP, cuda::GroupedGemmAlgo::CUBLAS_GROUPED};

}  // namespace

TEST_CASE("gpu grouped GEMM (both algorithms) matches the CPU at small shapes with empty experts", "[gpu][moe]") {
    SKEW_REQUIRE_GPU();
    for (const auto algo : kAlgos) {
        AlgoGuard guard(algo);
        INFO("algorithm " << cuda::grouped_gemm_algo_name(algo));
        check_grouped(10, 64, 96, skewed_offsets(1000, 10, {2, 7}, 1), 10);
        check_grouped(16, 40, 24, skewed_offsets(333, 16, {0, 1, 5, 15}, 2), 20);  // first and last empty
        check_grouped(4, 32, 32, skewed_offsets(7, 4, {0, 2, 3}, 3), 30);           // one expert, 7 rows
        check_grouped(3, 32, 32, std::vector<int64_t>{0, 0, 0, 0}, 40);             // no rows at all
    }
}

TEST_CASE("gpu grouped GEMM (both algorithms) matches the CPU at the paper's per-expert shape", "[gpu][moe][paper]") {
    SKEW_REQUIRE_GPU();
    // d_model 4096 -> d_expert 4096 per expert as in the paper; 4 experts (one empty) and 300 rows
    // keep the CPU reference to a few GFLOP per product.
    for (const auto algo : kAlgos) {
        AlgoGuard guard(algo);
        INFO("algorithm " << cuda::grouped_gemm_algo_name(algo));
        check_grouped(4, 4096, 4096, skewed_offsets(300, 4, {1}, 4), 50);
    }
}

TEST_CASE("gpu grouped GEMM reads the offsets once per dispatch, and not stale ones after a host write", "[gpu][moe]") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 300, K = 2, E = 6, IN = 32, OUT = 48, rows = n * K;
    std::vector<int32_t> idx(static_cast<size_t>(n * K));
    for (int64_t t = 0; t < n; ++t) {  // experts 0 and 1 (1 never for even t), 3..5; expert 2 empty
        idx[static_cast<size_t>(t * K)] = int32_t(t % 2 == 0 ? 0 : 1);
        idx[static_cast<size_t>(t * K + 1)] = int32_t(3 + t % 3);
    }
    std::vector<int64_t> s2c(static_cast<size_t>(rows)), c2s(static_cast<size_t>(rows)), off(static_cast<size_t>(E + 1));
    cpu->moe_dispatch(s2c.data(), c2s.data(), off.data(), idx.data(), n, K, E);
    const auto inp = random_bf16(rows * IN, 61), w = random_bf16(E * OUT * IN, 62);
    Dev<bf16> ginp(inp), gw(w), gout(static_cast<size_t>(rows * OUT));
    Dev<int32_t> gidx(idx);
    Dev<int64_t> gs2c(s2c.size()), gc2s(c2s.size()), goff(off.size());
    for (const auto algo : kAlgos) {
        AlgoGuard guard(algo);
        INFO("algorithm " << cuda::grouped_gemm_algo_name(algo));
        cuda::GroupedMatmul& gm = gpu().grouped_matmul();
        gpu().synchronize();
        const int64_t copies0 = gm.offset_copies();
        gpu().moe_dispatch(gs2c.p, gc2s.p, goff.p, gidx.p, n, K, E);
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
        CHECK(gm.offset_copies() - copies0 == 1);  // the dispatch's copy, read by both products
        std::vector<bf16> out(static_cast<size_t>(rows * OUT));
        cpu->moe_matmul_forward(out.data(), inp.data(), w.data(), off.data(), E, IN, OUT);
        require_close("grouped forward after dispatch", gout.get(), out, 1e-5);

        // two MoE blocks (two offsets buffers) dispatched, then each block's products, the backward
        // in reverse: every product reads its own block's prefetched copy, no copy at the call
        Dev<int64_t> goff_b(off.size()), gs2c_b(s2c.size()), gc2s_b(c2s.size());
        gpu().synchronize();
        const int64_t copies1 = gm.offset_copies();
        gpu().moe_dispatch(gs2c.p, gc2s.p, goff.p, gidx.p, n, K, E);
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
        gpu().moe_dispatch(gs2c_b.p, gc2s_b.p, goff_b.p, gidx.p, n, K, E);
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff_b.p, E, IN, OUT);
        int64_t first = -1;  // a host read between forward and backward (the loss) keeps the copies
        gpu().copy_to_host(&first, goff.p, sizeof(first));
        CHECK(first == 0);
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);  // block a's backward, after b's
        CHECK(gm.offset_copies() - copies1 == 2);  // one per dispatch (the last dispatch's only: 3)
        require_close("grouped forward of the first of two blocks", gout.get(), out, 1e-5);

        // other offsets written by the host into the same buffer after a dispatch: read afresh
        gpu().moe_dispatch(gs2c.p, gc2s.p, goff.p, gidx.p, n, K, E);
        std::vector<int64_t> off2 = off;
        for (int64_t e = 1; e <= E; ++e) off2[static_cast<size_t>(e)] = std::min<int64_t>(rows, e * rows / E + 1);
        off2[static_cast<size_t>(E)] = rows;
        gpu().copy_to_device(goff.p, off2.data(), int64_t(off2.size() * sizeof(int64_t)));
        gpu().moe_matmul_forward(gout.p, ginp.p, gw.p, goff.p, E, IN, OUT);
        cpu->moe_matmul_forward(out.data(), inp.data(), w.data(), off2.data(), E, IN, OUT);
        require_close("grouped forward after a host write of the offsets", gout.get(), out, 1e-5);
    }
}
