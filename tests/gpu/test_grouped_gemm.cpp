// GPU test of the grouped expert GEMM's offsets (kernels/cuda/moe_matmul.h): one device-to-host copy
// of a dispatch's offsets serves every product of that MoE block (both algorithms: the per-expert
// cuBLASLt loop and one cublasGemmGroupedBatchedEx per product), a second block keeps its own copy,
// and offsets a host write replaced are read afresh. The products' values at every shape are rows of
// the op table (docs/backend-ops.md; `SKEW_GROUPED_GEMM=cublas_grouped backend_ops --filter
// moe_matmul` for the second algorithm).
#include <algorithm>

#include "kernels/cuda/moe_matmul.h"
#include "tests/gpu/gpu_harness.h"

using namespace skew;
using namespace skew::test;

namespace {

struct AlgoGuard {  // restore the shared backend's algorithm after a test
    explicit AlgoGuard(cuda::GroupedGemmAlgo a) { gpu().grouped_matmul().set_algo(a); }
    ~AlgoGuard() { gpu().grouped_matmul().set_algo(cuda::GroupedGemmAlgo::PER_EXPERT_LOOP); }
};

const cuda::GroupedGemmAlgo kAlgos[] = {cuda::GroupedGemmAlgo::PER_EXPERT_LOOP, cuda::GroupedGemmAlgo::CUBLAS_GROUPED};

}  // namespace

TEST_CASE("gpu grouped GEMM reads the offsets once per dispatch, and not stale ones after a host write", "[gpu][moe]") {
    SKEW_REQUIRE_GPU();
    auto cpu = cpu_backend();
    const int64_t n = 300, K = 2, E = 6, IN = 32, OUT = 48, rows = n * K;
    std::vector<int32_t> idx(static_cast<size_t>(n * K));
    for (int64_t t = 0; t < n; ++t) {  // experts 0 and 1 (1 never for even t), 3..5; expert 2 empty
        idx[static_cast<size_t>(t * K)] = int32_t(t % 2 == 0 ? 0 : 1);
        idx[static_cast<size_t>(t * K + 1)] = int32_t(3 + t % 3);
    }
    std::vector<int64_t> s2c(static_cast<size_t>(rows)), c2s(static_cast<size_t>(rows)),
        off(static_cast<size_t>(E + 1));
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
