// The CPU write-back (optim/optim_internal.h store_update, for_each_write) and the CUDA kernels'
// (kernels/cuda/optim_kernels.h optim_write_bf16 with optim_write_word / optim_write_words8, fed by
// optim/device_write.h) are one rule: evaluated on the host, both write the same bf16 bits for every
// rounding mode, fused or premultiplied decay, and a slot whose noise index starts past element 0.
// Part of test_optim in CUDA builds only (the GPU side's header: tests/CMakeLists.txt); the kernels
// themselves are compared in tests/gpu.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cuda/optim_kernels.h"
#include "optim/device_write.h"
#include "optim/optim_internal.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;

TEST_CASE("CPU and CUDA write-back give the same bf16 bits for every rounding and decay mode") {
    ParamInfo p =
        test::make_param("blocks.1.moe.experts.w1", {3, 8, 12}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 5);
    const int64_t n = p.numel();
    std::vector<uint16_t> w0(static_cast<size_t>(n));
    std::vector<float> u(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        w0[size_t(i)] = f32_to_bf16(0.5f + 0.01f * float(i % 37) - 0.2f * float(i % 3)).bits;
        u[size_t(i)] = 0.03f * float(i % 11) - 0.15f;
    }
    const OptimStep step{3, 0.01, 99, 1.0f};
    for (Rounding mode : {Rounding::STOCHASTIC, Rounding::DITHERED, Rounding::NEAREST}) {
        for (WeightDecayMode wdm : {WeightDecayMode::FUSED, WeightDecayMode::BF16_PREMULTIPLY}) {
            OptimizerConfig opt = builtin_optimizer("adamw");
            opt.rounding = mode;
            opt.weight_decay_mode = wdm;
            std::vector<uint16_t> cpu_loop = w0, cpu_one = w0;
            ParamSlot s;
            s.info = &p;
            s.element_base = 4;  // a one-matrix slot's noise offset, a multiple of 4 as the kernels need
            s.weight = cpu_loop.data();
            const optim_detail::WriteBack wb = optim_detail::make_write_back(opt, s, step, 0.01, 0.01, 0.3);
            optim_detail::for_each_write(s, wb, 0, n, [&](int64_t i) { return u[size_t(i)]; });
            s.weight = cpu_one.data();
            for (int64_t i = 0; i < n; ++i) optim_detail::store_update(s, wb, i, u[size_t(i)]);

            const cuda::OptimWrite dw = device_write(wb);  // what optimizer_cuda.cpp and galore_cuda.cpp pass
            INFO("rounding " << choice_name(mode) << ", premultiply " << (wdm == WeightDecayMode::BF16_PREMULTIPLY));
            int differ_loop = 0, differ_one = 0, differ_vec = 0;
            for (int64_t i = 0; i < n; ++i) {
                const float w = bf16_to_f32(bf16{w0[size_t(i)]});
                const uint32_t r = cuda::optim_write_word(dw, uint64_t(i));
                const uint16_t gpu = cuda::optim_write_bf16(dw, w, u[size_t(i)], r).bits;
                differ_loop += gpu != cpu_loop[size_t(i)];
                differ_one += gpu != cpu_one[size_t(i)];
            }
            for (int64_t i0 = 0; i0 < n; i0 += 8) {
                uint32_t r[8];
                cuda::optim_write_words8(dw, uint64_t(i0), r);
                for (int k = 0; k < 8; ++k) {
                    const size_t i = size_t(i0 + k);
                    differ_vec += cuda::optim_write_bf16(dw, bf16_to_f32(bf16{w0[i]}), u[i], r[k]).bits != cpu_loop[i];
                }
            }
            CHECK(differ_loop == 0);
            CHECK(differ_one == 0);
            CHECK(differ_vec == 0);
            // the decay and update moved some weights, so the comparison is not of untouched values
            int moved = 0;
            for (int64_t i = 0; i < n; ++i) moved += cpu_loop[size_t(i)] != w0[size_t(i)];
            CHECK(moved > n / 2);
        }
    }
}
TEST_CASE("device_write carries every write-back field, the element base as a 64-bit index") {
    ParamInfo p =
        test::make_param("blocks.1.moe.experts.w2", {2, 4, 8}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W2, 9);
    p.expert_offset = int64_t(1) << 30;  // a rank's first expert far into a huge bank: offset 2^35 elements
    ParamSlot s;
    s.info = &p;
    s.element_base = 32;
    OptimizerConfig opt = builtin_optimizer("adamw");
    opt.rounding = Rounding::DITHERED;
    opt.weight_decay_mode = WeightDecayMode::BF16_PREMULTIPLY;
    const OptimStep step{7, 0.02, 1234, 1.0f};
    const optim_detail::WriteBack wb = optim_detail::make_write_back(opt, s, step, 0.5, 0.02, 0.1);
    const cuda::OptimWrite w = device_write(wb);
    CHECK(w.rounding == uint8_t(ROUNDING_DITHERED));
    CHECK(w.premultiply);
    CHECK(w.keep == wb.keep);
    CHECK(w.lr == wb.lr);
    CHECK(w.lr == 0.5f);
    CHECK(w.seed == 1234);
    CHECK(w.step == 7);
    CHECK(w.tensor == 9);
    CHECK(w.element_base == (uint64_t(1) << 35) + 32);
    CHECK(w.element_base == uint64_t(wb.element_base));
}
