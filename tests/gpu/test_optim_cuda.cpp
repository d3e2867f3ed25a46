// CPU/CUDA twin tests of the optimizer step (docs/design.md "Two backends, one model") for
// SkewAdam (every tier kind: factored with and without momentum, full, none), Adafactor, AdamW and
// Lion: several steps on both backends from the same weights, gradients (fp32 and bf16) and Philox
// stream, with the folded clip coefficient (OptimStep::grad_scale) active on some steps, shapes that
// take the 16-byte path, ragged 2048-column segments and the scalar fallback, and one tensor of more
// than 2^31 elements. AdamW and Lion are elementwise with the same fp32 operations: equal bit for bit.
// The factored and RMS-clipped updates sum in fp64 in another order than the CPU: their states must
// agree to 1e-6 relative, and the weights may differ by one bf16 ulp in a few elements (counted,
// at most 0.2% of a tensor). Muon and GaLore have their own tests.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>

#include "engine/config.h"
#include "kernels/common/optim_math.h"
#include "kernels/common/philox.h"
#include "optim/optimizer_cuda.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

float g_at(uint32_t t, uint64_t i, float s) { return s * philox_normal(PhiloxKey{5, 77}, 0, t, i); }

void add_model(TensorSet& ts) {
    ts.add(make_param("q", {48, 40}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));  // 16-byte path
    ts.add(make_param("ln", {40}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 1));
    ts.add(make_param("experts", {3, 32, 40}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 2));
    ts.add(make_param("router", {4, 40}, DType::F32, Tier::ROUTER, Role::ROUTER, 3));
    ts.add(make_param("wide", {2, 6, 2064}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W2, 4));     // ragged segment
    ts.add(make_param("odd", {5, 37}, DType::BF16, Tier::BACKBONE, Role::ATTN_O, 5));             // scalar path
    ts.add(make_param("wte", {3, 2100}, DType::BF16, Tier::BACKBONE, Role::TOKEN_EMBEDDING, 6));  // scalar, 2 segments
    ts.add(make_param("bias", {1001}, DType::BF16, Tier::BACKBONE, Role::NORM_BIAS, 7));          // vector tail
}

float bf16_ulp(float x) {
    int e;
    std::frexp(std::fabs(x), &e);
    return std::ldexp(1.0f, e - 8);
}

/// Device copy of a host buffer, freed at scope end.
struct DevBuf {
    void* p = nullptr;
    DevBuf(const void* src, size_t bytes) {
        cuda_check(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
        if (src) cuda_check(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    }
    ~DevBuf() { cudaFree(p); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
};

struct TwinCase {
    const char* name;
    bool exact;  // elementwise with the same operations: bit for bit
};

void run_twin(const TwinCase& tc, Rounding mode, DType grad_dtype, bool matrix_by_matrix = false) {
    INFO(tc.name << " rounding " << choice_name(mode) << " grads " << (grad_dtype == DType::BF16 ? "bf16" : "fp32")
                 << (matrix_by_matrix ? " matrix by matrix" : ""));
    OptimizerConfig opt = builtin_optimizer(tc.name);
    opt.rounding = mode;
    TensorSet cpu;
    add_model(cpu);
    cpu.bind(opt);
    std::vector<std::vector<bf16>> g16(cpu.infos.size());
    for (size_t t = 0; t < cpu.infos.size(); ++t) {
        for (int64_t i = 0; i < cpu.infos[t].numel(); ++i) cpu.set_weight(t, i, g_at(uint32_t(t), uint64_t(i), 0.5f));
        g16[t].resize(size_t(cpu.infos[t].numel()));
        if (grad_dtype == DType::BF16) {
            cpu.slots[t].grad = g16[t].data();
            cpu.slots[t].grad_dtype = DType::BF16;
        }
    }
    std::vector<std::unique_ptr<DevBuf>> bufs;
    auto dev = [&](const void* src, size_t bytes) {
        bufs.push_back(std::make_unique<DevBuf>(src, bytes));
        return bufs.back()->p;
    };
    std::vector<ParamSlot> gpu_slots = cpu.slots;
    const size_t gbytes = grad_dtype == DType::BF16 ? 2 : 4;
    for (size_t t = 0; t < gpu_slots.size(); ++t) {
        const ParamInfo& p = cpu.infos[t];
        gpu_slots[t].weight = dev(cpu.slots[t].weight, size_t(p.bytes()));
        gpu_slots[t].grad = dev(nullptr, size_t(p.numel()) * gbytes);
        for (const StateSlotSpec& s : optimizer_param_state(opt, p))
            gpu_slots[t].state[size_t(s.kind)] =
                static_cast<float*>(dev(cpu.slots[t].st(s.kind), size_t(s.numel()) * 4));
    }
    CudaOptimContext ctx;
    ctx.scratch_bytes = optimizer_cuda_scratch_bytes(opt, gpu_slots);
    ctx.scratch = dev(nullptr, size_t(std::max<int64_t>(ctx.scratch_bytes, 256)));
    ctx.matrix_by_matrix = matrix_by_matrix;
    for (int step = 1; step <= 4; ++step) {
        for (size_t t = 0; t < cpu.infos.size(); ++t) {
            const int64_t n = cpu.infos[t].numel();
            for (int64_t i = 0; i < n; ++i) {
                const float g = g_at(uint32_t(10 * step + t), uint64_t(i), 0.01f);
                g16[t][size_t(i)] = f32_to_bf16(g);
                cpu.grads[t][size_t(i)] = g;
            }
            const void* src = grad_dtype == DType::BF16 ? static_cast<const void*>(g16[t].data()) : cpu.grads[t].data();
            cuda_check(
                cudaMemcpy(const_cast<void*>(gpu_slots[t].grad), src, size_t(n) * gbytes, cudaMemcpyHostToDevice));
        }
        OptimStep st{step, 1e-3 * step, 42};
        st.grad_scale = step % 2 == 0 ? 0.37f : 1.0f;  // the clip coefficient, folded on even steps
        optimizer_step(opt, cpu.slots, st);
        optimizer_step_cuda(opt, gpu_slots, st, ctx);
    }
    cuda_check(cudaDeviceSynchronize());
    for (size_t t = 0; t < cpu.infos.size(); ++t) {
        const ParamInfo& p = cpu.infos[t];
        INFO("tensor " << p.name);
        std::vector<char> w(size_t(p.bytes()));
        cuda_check(cudaMemcpy(w.data(), gpu_slots[t].weight, w.size(), cudaMemcpyDeviceToHost));
        int64_t differ = 0, beyond_ulp = 0;
        for (int64_t i = 0; i < p.numel(); ++i) {
            float a, b = cpu.weight(t, i);
            if (p.dtype == DType::BF16) {
                uint16_t h;
                std::memcpy(&h, w.data() + 2 * i, 2);
                a = bf16_to_f32(bf16{h});
                if (std::fabs(a - b) > bf16_ulp(std::fmax(std::fabs(a), std::fabs(b))) * 1.01f) ++beyond_ulp;
            } else {
                std::memcpy(&a, w.data() + 4 * i, 4);
                if (std::fabs(a - b) > 1e-6f * std::fabs(b) + 1e-9f) ++beyond_ulp;
            }
            if (std::memcmp(&a, &b, 4) != 0) ++differ;
        }
        INFO(differ << " of " << p.numel() << " weights differ");
        CHECK(beyond_ulp == 0);
        if (tc.exact) CHECK(differ == 0);
        else CHECK(double(differ) <= std::max(2.0, 0.002 * double(p.numel())));
        if (differ)
            WARN(tc.name << " " << choice_name(mode) << " " << p.name << ": " << differ << " of " << p.numel()
                         << " weights differ by one ulp");
        for (const StateSlotSpec& s : optimizer_param_state(opt, p)) {
            INFO("state " << choice_name(s.kind));
            std::vector<float> have(size_t(s.numel()));
            cuda_check(cudaMemcpy(have.data(), gpu_slots[t].st(s.kind), have.size() * 4, cudaMemcpyDeviceToHost));
            const float* want = cpu.slots[t].st(s.kind);
            int64_t bad = 0, neq = 0;
            for (int64_t i = 0; i < s.numel(); ++i) {
                if (have[size_t(i)] != want[i]) ++neq;
                if (std::fabs(double(have[size_t(i)]) - double(want[i])) > 1e-6 * std::fabs(double(want[i])) + 1e-30)
                    ++bad;
            }
            CHECK(bad == 0);
            if (tc.exact) CHECK(neq == 0);
        }
    }
}

}  // namespace

TEST_CASE(
    "CUDA optimizer step matches the CPU step: SkewAdam tiers, Adafactor, AdamW, Lion, bf16 and fp32 grads, folded "
    "clip") {
    SKEW_REQUIRE_GPU();
    const TwinCase cases[] = {{"skewadam", false},  {"uniform", false}, {"skewadam-factored-router", false},
                              {"adafactor", false}, {"adamw", true},    {"lion", true}};
    for (const TwinCase& tc : cases)
        for (Rounding mode : {Rounding::NEAREST, Rounding::STOCHASTIC, Rounding::DITHERED})
            for (DType gd : {DType::F32, DType::BF16}) run_twin(tc, mode, gd);
    // the RMS and write passes one matrix at a time: the same values
    run_twin({"skewadam", false}, Rounding::STOCHASTIC, DType::BF16, true);
    run_twin({"adafactor", false}, Rounding::STOCHASTIC, DType::F32, true);
}

TEST_CASE("CUDA Lion step on a tensor of more than 2^31 elements: 64-bit indices, rounding noise, tail") {
    SKEW_REQUIRE_GPU();
    const int64_t n = (int64_t(1) << 31) + 13;  // 13: a scalar tail after the 8-element vectors
    ParamInfo p = make_param("big", {n}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 9);
    OptimizerConfig opt = builtin_optimizer("lion");
    opt.rounding = Rounding::STOCHASTIC;
    void *w = nullptr, *g = nullptr, *m = nullptr, *scratch = nullptr;
    cuda_check(cudaMalloc(&w, size_t(n) * 2));
    cuda_check(cudaMalloc(&g, size_t(n) * 2));
    cuda_check(cudaMalloc(&m, size_t(n) * 4));
    cuda_check(cudaMalloc(&scratch, 256));
    cuda_check(cudaMemset(w, 0x3F, size_t(n) * 2));  // every weight 0x3F3F = 0.74609375
    cuda_check(cudaMemset(g, 0xBC, size_t(n) * 2));  // every gradient 0xBCBC = -0.02294921875
    cuda_check(cudaMemset(m, 0, size_t(n) * 4));
    ParamSlot s;
    s.info = &p;
    s.weight = w;
    s.grad = g;
    s.grad_dtype = DType::BF16;
    s.state[size_t(StateKind::MOMENTUM)] = static_cast<float*>(m);
    CudaOptimContext ctx;
    ctx.scratch = scratch;
    ctx.scratch_bytes = 256;
    OptimStep st{3, 0.01, 1234};
    st.grad_scale = 0.5f;
    optimizer_step_cuda(opt, std::span<ParamSlot>(&s, 1), st, ctx);
    cuda_check(cudaDeviceSynchronize());
    // The expected value of element i from the shared per-element math (kernels/common).
    const float w0 = bf16_to_f32(bf16{0x3F3F}), g0 = rn_mul(bf16_to_f32(bf16{0xBCBC}), 0.5f);
    float m0 = 0.0f;
    const float u =
        lion_element(g0, m0, float(opt.beta1), float(1.0 - opt.beta1), float(opt.beta2), float(1.0 - opt.beta2));
    const float keep = float(1.0 - st.lr * opt.weight_decay), x = optim_decayed_target(w0, keep, float(st.lr), u);
    const int64_t probes[] = {0,
                              1,
                              7,
                              8,
                              4095,
                              (int64_t(1) << 31) - 8,
                              (int64_t(1) << 31) - 1,
                              int64_t(1) << 31,
                              (int64_t(1) << 31) + 1,
                              (int64_t(1) << 31) + 7,
                              (int64_t(1) << 31) + 8,
                              n - 5,
                              n - 1};
    for (int64_t i : probes) {
        INFO("element " << i);
        uint16_t h;
        float mi;
        cuda_check(cudaMemcpy(&h, static_cast<char*>(w) + 2 * i, 2, cudaMemcpyDeviceToHost));
        cuda_check(cudaMemcpy(&mi, static_cast<char*>(m) + 4 * i, 4, cudaMemcpyDeviceToHost));
        const bf16 want = bf16_round_stochastic(x, rounding_bits(st.seed, uint32_t(st.t), p.index, uint64_t(i)));
        CHECK(h == want.bits);
        CHECK(mi == m0);
    }
    cudaFree(w);
    cudaFree(g);
    cudaFree(m);
    cudaFree(scratch);
}

TEST_CASE("CUDA SkewAdam factored step on an expert stack of more than 2^31 elements matches the per-element math") {
    SKEW_REQUIRE_GPU();
    const int64_t E = 2, rows = 32768, cols = 32776, n = E * rows * cols;  // 2.148e9 > 2^31
    ParamInfo p = make_param("experts", {E, rows, cols}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 11);
    OptimizerConfig opt = builtin_optimizer("skewadam");
    opt.rounding = Rounding::NEAREST;
    opt.update_clip = 4.0;  // |U| = 1 here: no clipping, so every element's U is the same
    void *w = nullptr, *g = nullptr, *R = nullptr, *C = nullptr;
    cuda_check(cudaMalloc(&w, size_t(n) * 2));
    cuda_check(cudaMalloc(&g, size_t(n) * 2));
    cuda_check(cudaMalloc(&R, size_t(E * rows) * 4));
    cuda_check(cudaMalloc(&C, size_t(E * cols) * 4));
    cuda_check(cudaMemset(w, 0x3F, size_t(n) * 2));
    cuda_check(cudaMemset(g, 0xBC, size_t(n) * 2));
    cuda_check(cudaMemset(R, 0, size_t(E * rows) * 4));
    cuda_check(cudaMemset(C, 0, size_t(E * cols) * 4));
    ParamSlot s;
    s.info = &p;
    s.weight = w;
    s.grad = g;
    s.grad_dtype = DType::BF16;
    s.state[size_t(StateKind::SECOND_ROW)] = static_cast<float*>(R);
    s.state[size_t(StateKind::SECOND_COL)] = static_cast<float*>(C);
    CudaOptimContext ctx;
    ctx.scratch_bytes = optimizer_cuda_scratch_bytes(opt, std::span<const ParamSlot>(&s, 1));
    cuda_check(cudaMalloc(&ctx.scratch, size_t(ctx.scratch_bytes)));
    OptimStep st{1, 3e-3, 42};
    optimizer_step_cuda(opt, std::span<ParamSlot>(&s, 1), st, ctx);
    cuda_check(cudaDeviceSynchronize());
    // The CPU twin on a small stack of the same constant values gives every element's value.
    TensorSet small;
    small.add(make_param("experts", {E, 8, 16}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 11));
    small.bind(opt);
    for (int64_t i = 0; i < small.infos[0].numel(); ++i) {
        small.w16[0][size_t(i)] = 0x3F3F;
        small.grads[0][size_t(i)] = bf16_to_f32(bf16{0xBCBC});
    }
    optimizer_step(opt, small.slots, st);
    const uint16_t want = small.w16[0][0];
    CHECK(want != 0x3F3F);
    const int64_t probes[] = {
        0, 8, cols - 1, rows * cols - 1, rows * cols, (int64_t(1) << 31) - 1, int64_t(1) << 31, n - cols, n - 1};
    for (int64_t i : probes) {
        INFO("element " << i);
        uint16_t h;
        cuda_check(cudaMemcpy(&h, static_cast<char*>(w) + 2 * i, 2, cudaMemcpyDeviceToHost));
        CHECK(h == want);
    }
    float r_last, c_last;
    cuda_check(cudaMemcpy(&r_last, static_cast<char*>(R) + 4 * (E * rows - 1), 4, cudaMemcpyDeviceToHost));
    cuda_check(cudaMemcpy(&c_last, static_cast<char*>(C) + 4 * (E * cols - 1), 4, cudaMemcpyDeviceToHost));
    CHECK(r_last == small.slots[0].st(StateKind::SECOND_ROW)[0]);
    CHECK(c_last == small.slots[0].st(StateKind::SECOND_COL)[0]);
    cudaFree(w);
    cudaFree(g);
    cudaFree(R);
    cudaFree(C);
    cudaFree(ctx.scratch);
}
