// ZeRO-1 on the CUDA step (docs/distributed.md, "ZeRO-1"): an expert bank stepped as two ranges of
// experts (owned_slot: weight, gradient and state at the range, element_base its first element in
// the bank) equals the whole-bank CUDA step. The rounding noise is keyed by the bank's element index
// (OptimWrite::element_base) and every update is per expert matrix, so the element-wise and
// factored updates are equal bit for bit. Muon's Newton-Schulz runs as batched cuBLAS products and
// GaLore's projections likewise: cuBLAS may pick another kernel for another batch count, so those
// are held to one bf16 ulp and 1e-5 relative state (the test reports whether they were exact).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "engine/config.h"
#include "kernels/common/philox.h"
#include "optim/optimizer_cuda.h"
#include "optim/zero_partition.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) {
        cuda_check(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
        cuda_check(cudaMemset(p, 0, std::max<size_t>(bytes, 256)));
    }
    ~DevMem() { cudaFree(p); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

float bf16_ulp(float x) {
    int e;
    std::frexp(std::fabs(x), &e);
    return std::ldexp(1.0f, e - 8);
}

void run_split(const char* name, bool exact, const std::vector<int64_t>& shape, int64_t split) {
    INFO(name << " bank " << shape[0] << " x " << shape[1] << " x " << shape[2] << " split at expert " << split);
    OptimizerConfig opt = builtin_optimizer(name);
    opt.rank = 4;
    opt.rounding = Rounding::STOCHASTIC;
    ParamInfo bank = make_param("blocks.1.moe.experts.w1", shape, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 3);
    bank.block = 1;
    const int64_t n = bank.numel(), E = shape[0], per = shape[1] * shape[2];
    std::vector<bf16> w0(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        w0[size_t(i)] = f32_to_bf16(0.5f * philox_normal(PhiloxKey{5, 77}, 0, 1, uint64_t(i)));
    std::vector<std::unique_ptr<DevMem>> mem;
    auto dev = [&](size_t bytes) {
        mem.push_back(std::make_unique<DevMem>(bytes));
        return mem.back()->p;
    };
    // the whole bank, and the same bank stepped as ranges [0, split) and [split, E)
    ParamSlot whole;
    whole.info = &bank;
    whole.weight = dev(size_t(n) * 2);
    whole.grad = dev(size_t(n) * 4);
    whole.grad_dtype = DType::F32;
    for (const StateSlotSpec& s : optimizer_param_state(opt, bank))
        whole.state[size_t(s.kind)] = static_cast<float*>(dev(size_t(s.numel()) * 4));
    ParamSlot split_bank = whole;
    split_bank.weight = dev(size_t(n) * 2);
    split_bank.state.fill(nullptr);
    cuda_check(cudaMemcpy(whole.weight, w0.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(split_bank.weight, w0.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
    const OwnedRange ranges[2] = {{bank.index, 0, split, 0}, {bank.index, split, E, 0}};
    const ParamInfo infos[2] = {owned_param_info(bank, ranges[0]), owned_param_info(bank, ranges[1])};
    std::vector<ParamSlot> parts;
    for (int k = 0; k < 2; ++k) {
        ParamSlot s = owned_slot(split_bank, infos[k], ranges[k], 0);
        for (const StateSlotSpec& st : optimizer_param_state(opt, infos[k]))
            s.state[size_t(st.kind)] = static_cast<float*>(dev(size_t(st.numel()) * 4));
        parts.push_back(s);
    }
    CHECK(parts[1].element_base == split * per);
    std::vector<ParamSlot> one{whole};
    CudaOptimContext ctx;
    ctx.scratch_bytes = optimizer_cuda_scratch_bytes(opt, one);
    ctx.scratch = dev(size_t(ctx.scratch_bytes));
    ctx.stream = gpu().stream();
    REQUIRE(cublasCreate(&ctx.cublas) == CUBLAS_STATUS_SUCCESS);
    cublasSetStream(ctx.cublas, ctx.stream);
    std::vector<float> g(static_cast<size_t>(n));
    for (int step = 1; step <= 3; ++step) {
        for (int64_t i = 0; i < n; ++i)
            g[size_t(i)] = 0.01f * philox_normal(PhiloxKey{5, 78}, uint32_t(step), 2, uint64_t(i));
        cuda_check(cudaMemcpy(const_cast<void*>(whole.grad), g.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
        const OptimStep st{step, 1e-2, 42};
        optimizer_step_cuda(opt, one, st, ctx);
        optimizer_step_cuda(opt, parts, st, ctx);  // the parts read the same gradient buffer at their offsets
        cuda_check(cudaStreamSynchronize(ctx.stream));
    }
    cublasDestroy(ctx.cublas);
    std::vector<bf16> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    cuda_check(cudaMemcpy(a.data(), whole.weight, size_t(n) * 2, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(b.data(), split_bank.weight, size_t(n) * 2, cudaMemcpyDeviceToHost));
    int64_t differ = 0, beyond = 0, moved = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float x = bf16_to_f32(a[size_t(i)]), y = bf16_to_f32(b[size_t(i)]);
        differ += a[size_t(i)].bits != b[size_t(i)].bits;
        beyond += std::fabs(x - y) > bf16_ulp(std::fmax(std::fabs(x), std::fabs(y))) * 1.01f;
        moved += a[size_t(i)].bits != w0[size_t(i)].bits;
    }
    CHECK(moved > 0);
    CHECK(beyond == 0);
    if (exact) CHECK(differ == 0);
    else if (differ)
        WARN(name << ": " << differ << " of " << n << " weights differ by one ulp between the split and whole steps");
    for (const StateSlotSpec& s : optimizer_param_state(opt, bank)) {
        INFO("state " << choice_name(s.kind));
        std::vector<float> full(size_t(s.numel()));
        cuda_check(cudaMemcpy(full.data(), whole.st(s.kind), full.size() * 4, cudaMemcpyDeviceToHost));
        const int64_t per_state = s.numel() / E;
        int64_t neq = 0, bad = 0;
        for (int k = 0; k < 2; ++k) {
            const int64_t count = (ranges[k].matrix_end - ranges[k].matrix_begin) * per_state;
            std::vector<float> part(static_cast<size_t>(count));
            cuda_check(cudaMemcpy(part.data(), parts[size_t(k)].st(s.kind), part.size() * 4, cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < count; ++i) {
                const double want = full[size_t(ranges[k].matrix_begin * per_state + i)], have = part[size_t(i)];
                neq += want != have;
                bad += std::fabs(want - have) > 1e-5 * std::fabs(want) + 1e-30;
            }
        }
        CHECK(bad == 0);
        if (exact) CHECK(neq == 0);
    }
}

}  // namespace

TEST_CASE(
    "CUDA ZeRO-1: an expert bank stepped as two ranges of experts equals the whole-bank CUDA step "
    "(element_base keys the rounding noise)") {
    SKEW_REQUIRE_GPU();
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{4, 32, 48}, std::vector<int64_t>{5, 12, 36}}) {
        for (const char* name : {"skewadam", "skewadam-expert-momentum", "adafactor", "adamw", "lion"})
            run_split(name, true, shape, 1);
        run_split("muon", false, shape, 3);
        run_split("galore-paper", false, shape, 2);
    }
}
