// One whole training step of configs/tiny.yaml on the CUDA backend against the CPU backend: same
// Philox initialization, same batch, same router noise; losses, every gradient and the grad norm;
// then the optimizer step on identical inputs (the CPU's clipped gradients and weights copied to the
// device), its weight changes compared bit for bit (bf16: at most one ulp apart, counted); and the
// measured peak device memory of the step against the memory plan. Skipped where no GPU is visible
// (gpu_main.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/cuda/device_alloc.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "optim/optimizer_cuda.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/test_paths.h"

using namespace skew;
using namespace skew::test;

namespace {

// Tolerances (normalized MSE unless said otherwise). Activations are bf16 on both backends, but the
// CUDA kernels accumulate in other orders (cuBLASLt tiles, warp reductions, flash-style attention),
// so results agree to bf16 precision, not bit for bit. One bf16 rounding that lands differently on
// the two sides is a relative error of at most 2^-8, NMSE ~(2^-8)^2/12 ~ 1.3e-6 per rounding where
// they disagree; a gradient passes through a handful, so 1e-4 leaves ~10x margin while a wrong term
// (a missing aux-loss gradient, a transposed matmul: NMSE >= 1e-2) still fails.
constexpr double LM_LOSS_ABS = 2e-3;    // |cuda - cpu| of each microbatch's mean cross-entropy (nats, ~10.8)
constexpr double AUX_LOSS_REL = 1e-5;   // balance and z-loss: the zero-initialized router routes alike
constexpr double GRAD_NMSE = 1e-4;      // every parameter's gradient after the step's microbatches
constexpr double GRAD_NORM_REL = 3e-4;  // the global gradient norm (the H200 agreed to 4-5 decimals)
// The optimizer step is compared on identical inputs (the CPU's clipped gradients and weights copied
// to the device), so it is the update alone that is compared: a bf16 weight after the step must equal
// the CPU's bit for bit, or (when the fp32 values straddle a stochastic-rounding threshold) be one
// bf16 ulp away; such straddles happen with probability ~ (fp32 difference) / (bf16 ulp) ~ 2^-16.
constexpr double BF16_ULP_DIFFER_FRAC = 1e-3;  // at most this share of bf16 weights 1 ulp away, none further
constexpr double F32_DELTA_REL = 1e-4;  // fp32 weights: |delta_cuda - delta_cpu| <= this * |delta_cpu| + 1 fp32 ulp
// The measured device memory a step adds beyond the plan's arena (which holds the backend's op
// scratch): this much for cuBLAS / cuBLASLt handles and workspaces and lazily loaded kernel modules.
constexpr int64_t PEAK_SLACK_BYTES = int64_t(512) << 20;

std::vector<int32_t> lcg_stream(int64_t n, uint32_t seed, int32_t vocab) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    uint64_t s = seed;
    for (auto& t : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t = int32_t((s >> 33) % uint64_t(vocab));
    }
    return v;
}

// A tensor of backend memory as host fp32 (bf16 widened).
std::vector<float> host_f32(Backend& be, ConstTensorRef t, int64_t n) {
    std::vector<float> out(static_cast<size_t>(n));
    if (t.type == ScalarType::F32) {
        be.copy_to_host(out.data(), t.data, n * int64_t(sizeof(float)));
    } else {
        std::vector<bf16> b(static_cast<size_t>(n));
        be.copy_to_host(b.data(), t.data, n * int64_t(sizeof(bf16)));
        for (size_t i = 0; i < b.size(); ++i) out[i] = bf16_to_f32(b[i]);
    }
    return out;
}

// configs/tiny.yaml of the source tree; a binary carried to another machine (bench/gpu_check.sh's
// carry mode) runs from the repository root there, so fall back to the relative path.
std::string tiny_config() { return skew::test::source_path("configs/tiny.yaml"); }

// One side of the comparison: a model over its own arena and backend.
/// One backend's training session with the optimizer's slots over its arena.
struct Side {
    std::unique_ptr<Session> session;
    Arena& arena;
    Model& model;
    std::vector<ParamSlot> slots;

    Side(std::unique_ptr<Session> s, const OptimizerConfig& opt)
        : session(std::move(s)), arena(session->arena), model(session->model),
          slots(arena_param_slots(opt, session->table, arena)) {}
};

SessionSpec training_spec(const OptimizerConfig& opt, const Config& cfg) {
    SessionSpec spec;
    spec.optimizer = &opt;
    spec.microbatch = cfg.train.microbatch;
    return spec;
}

}  // namespace

TEST_CASE("configs/tiny.yaml: one training step on the CUDA backend matches the CPU backend", "[gpu][train]") {
    SKEW_REQUIRE_GPU();
    // The plan sized for the CUDA backend (its op scratch, widening buffer and fused-head workspace
    // in the arena); the CPU side runs from the same plan.
    const Config cfg = load_config(tiny_config(), {"runtime.grad_dtype=fp32", "runtime.backend=cuda"});
    const OptimizerConfig opt = builtin_optimizer("skewadam");
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
    REQUIRE(accum >= 1);

    auto cpu = make_cpu_backend();
    cuda::CudaBackend& dev = gpu();
    dev.synchronize();
    const int64_t used_before = gpu().device_memory_used_bytes();

    const int64_t own_scratch_before = dev.scratch_bytes();
    // Both sessions from one config, so one plan; the CUDA session binds the backend's scratch and
    // widening buffer to the arena, as the trainer's does: the step must not grow backend-owned memory.
    Side c(open_session(cfg, *cpu, training_spec(opt, cfg)), opt);
    Side g(open_session(cfg, dev, training_spec(opt, cfg)), opt);
    const MemoryPlan& plan = g.session->plan;
    REQUIRE(plan.find("ws.cuda_scratch") >= 0);
    REQUIRE(plan.find("ws.cuda_widen") >= 0);
    int64_t used_peak = gpu().device_memory_used_bytes();

    model_init(c.model, uint64_t(cfg.train.seed));
    model_init(g.model, uint64_t(cfg.train.seed));

    // the batch: B*T+1 tokens of the real vocabulary, x = all but the last, y = all but the first
    const std::vector<int32_t> stream = lcg_stream(cfg.train.batch_size * T + 1, 7, int32_t(cfg.model.vocab_size));
    const uint32_t step = 1;
    model_zero_grads(c.model);
    model_zero_grads(g.model);
    for (int64_t i = 0; i < accum; ++i) {
        const int32_t* x = stream.data() + i * mb * T;
        const LossParts lc = model_forward_backward(c.model, x, x + 1, i, step, accum, true);
        const LossParts lg = model_forward_backward(g.model, x, x + 1, i, step, accum, true);
        dev.synchronize();
        used_peak = std::max(used_peak, gpu().device_memory_used_bytes());
        INFO("microbatch " << i << ": lm loss cpu " << lc.lm_loss << " cuda " << lg.lm_loss);
        CHECK(std::abs(lg.lm_loss - lc.lm_loss) <= LM_LOSS_ABS);
        CHECK(lg.balance_loss == Approx(lc.balance_loss).epsilon(AUX_LOSS_REL));
        CHECK(lg.z_loss == Approx(lc.z_loss).epsilon(AUX_LOSS_REL));
        REQUIRE(lg.moe.size() == lc.moe.size());
    }

    for (size_t i = 0; i < c.model.params.size(); ++i) {
        const ParamRef& pc = c.model.params[i];
        const ParamRef& pg = g.model.params[i];
        require_nmse("grad." + pc.info->name, host_f32(dev, pg.grad, pg.numel()), host_f32(*cpu, pc.grad, pc.numel()),
                     GRAD_NMSE);
    }

    // clip (the trainer's order), then one optimizer step on each backend
    const double norm_c = model_clip_gradients(c.model, cfg.train.grad_clip);
    const double norm_g = model_clip_gradients(g.model, cfg.train.grad_clip);
    INFO("grad norm cpu " << norm_c << " cuda " << norm_g);
    CHECK(std::isfinite(norm_g));
    CHECK(norm_g == Approx(norm_c).epsilon(GRAD_NORM_REL));

    // Identical inputs for the update: the CPU's clipped gradients and its weights onto the device.
    std::vector<std::vector<unsigned char>> w_before(c.model.params.size());
    for (size_t i = 0; i < c.model.params.size(); ++i) {
        const ParamRef& pc = c.model.params[i];
        const ParamRef& pg = g.model.params[i];
        const int64_t gbytes = pc.numel() * (pc.grad.type == ScalarType::F32 ? 4 : 2), wbytes = pc.info->bytes();
        REQUIRE(pg.grad.type == pc.grad.type);
        dev.copy_to_device(pg.grad.data, pc.grad.data, gbytes);
        const auto* w = static_cast<const unsigned char*>(pc.w().data);
        w_before[i].assign(w, w + wbytes);
        dev.copy_to_device(pg.weight, w, wbytes);
    }
    dev.synchronize();

    OptimStep os;
    os.t = 1;
    os.lr = opt.lr;  // the peak lr, so that the update is visible next to the bf16 rounding
    os.seed = uint64_t(cfg.train.seed);
    optimizer_step(opt, c.slots, os);

    CudaOptimContext ctx;
    ctx.stream = dev.stream();
    REQUIRE(cublasCreate(&ctx.cublas) == CUBLAS_STATUS_SUCCESS);
    cublasSetStream(ctx.cublas, ctx.stream);
    const int wi = plan.find("ws.optimizer");
    REQUIRE(wi >= 0);
    ctx.scratch = g.arena.ptr(wi);
    ctx.scratch_bytes = plan.buffers[size_t(wi)].bytes();
    REQUIRE(optimizer_cuda_scratch_bytes(opt, g.slots) <= ctx.scratch_bytes);
    optimizer_step_cuda(opt, g.slots, os, ctx);
    dev.synchronize();
    used_peak = std::max(used_peak, gpu().device_memory_used_bytes());
    cublasDestroy(ctx.cublas);

    // The weight deltas: bf16 weights bit-identical or 1 ulp (counted), fp32 weights to F32_DELTA_REL.
    int64_t bf16_total = 0, bf16_moved = 0, bf16_one_ulp = 0, bf16_far = 0;
    for (size_t i = 0; i < c.model.params.size(); ++i) {
        const ParamRef& pc = c.model.params[i];
        const ParamRef& pg = g.model.params[i];
        const int64_t n = pc.numel();
        INFO("weight." << pc.info->name);
        if (pc.info->dtype == DType::BF16) {
            std::vector<uint16_t> gw(static_cast<size_t>(n)), cw(static_cast<size_t>(n)), w0(static_cast<size_t>(n));
            dev.copy_to_host(gw.data(), pg.w().data, n * 2);
            std::memcpy(cw.data(), pc.w().data, size_t(n) * 2);
            std::memcpy(w0.data(), w_before[i].data(), size_t(n) * 2);
            int64_t far = 0;
            for (size_t j = 0; j < size_t(n); ++j) {
                ++bf16_total;
                bf16_moved += cw[j] != w0[j];
                if (gw[j] == cw[j]) continue;
                // adjacent bf16 values of the same sign differ by 1 in their bit pattern
                const bool adjacent =
                    ((gw[j] ^ cw[j]) & 0x8000) == 0 && (gw[j] > cw[j] ? gw[j] - cw[j] : cw[j] - gw[j]) == 1;
                if (adjacent) ++bf16_one_ulp;
                else ++far;
            }
            bf16_far += far;
            CHECK(far == 0);
        } else {
            std::vector<float> gw(static_cast<size_t>(n)), cw(static_cast<size_t>(n)), w0(static_cast<size_t>(n));
            dev.copy_to_host(gw.data(), pg.w().data, n * 4);
            std::memcpy(cw.data(), pc.w().data, size_t(n) * 4);
            std::memcpy(w0.data(), w_before[i].data(), size_t(n) * 4);
            int64_t bad = 0;
            double worst = 0.0;
            for (size_t j = 0; j < size_t(n); ++j) {
                const double dc = double(cw[j]) - double(w0[j]), dg = double(gw[j]) - double(w0[j]);
                const double ulp = std::nextafter(std::fabs(cw[j]), INFINITY) - std::fabs(cw[j]);
                const double err = std::fabs(dg - dc);
                if (!(err <= F32_DELTA_REL * std::fabs(dc) + ulp)) ++bad;
                worst = max_nan(worst, err);
            }
            INFO("fp32 deltas off: " << bad << " of " << n << ", worst |delta_cuda - delta_cpu| " << worst);
            CHECK(bad == 0);
        }
    }
    INFO("bf16 weights: " << bf16_total << ", moved by the CPU step " << bf16_moved << ", CUDA 1 ulp away "
                          << bf16_one_ulp << ", further " << bf16_far);
    CHECK(bf16_moved > bf16_total / 4);  // the update is visible: the comparison is not of unchanged weights
    CHECK(double(bf16_one_ulp) <= BF16_ULP_DIFFER_FRAC * double(bf16_total));
    WARN("optimizer step on identical inputs: " << bf16_one_ulp << " of " << bf16_total
                                                << " bf16 weights 1 ulp from the CPU's, " << bf16_far << " further");

    const int64_t own_scratch_after = dev.scratch_bytes();
    // Every op's scratch came from the plan's ws.cuda_scratch: the backend grew nothing of its own.
    CHECK(own_scratch_after == own_scratch_before);

    // the measured peak against the plan: what the step added on the device is the arena (the
    // plan's peak), within the stated slack for the libraries
    const int64_t added = used_peak - used_before;
    const int64_t allowed = plan.peak_bytes + PEAK_SLACK_BYTES;
    INFO("device memory added " << added << " bytes; plan " << plan.peak_bytes << ", allowed " << allowed);
    WARN("tiny.yaml step: measured " << double(added) / double(1 << 20) << " MiB on the device, plan "
                                     << double(plan.peak_bytes) / double(1 << 20) << " MiB");
    CHECK(added >= plan.peak_bytes - (int64_t(2) << 20));  // cudaMemGetInfo counts in 2 MiB pages
    CHECK(added <= allowed);
}

// The arena holds everything a step needs (nothing is allocated outside it during a step): with the backend bound to the plan's buffers as the trainer binds them (cuBLASLt
// workspace ws.library, op scratch ws.cuda_scratch, widening buffer ws.cuda_widen), two whole
// steps (forward, backward, clip, SkewAdam) make no counted backend allocation (kernels/cuda/
// device_alloc.h: every cudaMalloc / cudaMallocHost of the backend goes through it), and the
// second step (kernels and cuBLASLt algorithms loaded by the first) takes no device memory at all
// by cudaMemGetInfo, which also sees the libraries' own allocations. Both gradient dtypes.
TEST_CASE("configs/tiny.yaml on the CUDA backend: a training step allocates nothing outside the arena",
          "[gpu][train][memory]") {
    SKEW_REQUIRE_GPU();
    for (const char* grad_dtype : {"bf16", "fp32"}) {
        INFO("runtime.grad_dtype " << grad_dtype);
        const Config cfg = load_config(tiny_config(), {std::string("runtime.grad_dtype=") + grad_dtype,
                                                       "runtime.backend=cuda", "runtime.workspace_gib=0.03125"});
        const OptimizerConfig opt = builtin_optimizer("skewadam");
        const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.grad_accum_steps();
        cuda::CudaBackend& dev = gpu();
        dev.synchronize();

        Side g(open_session(cfg, dev, training_spec(opt, cfg)),
               opt);  // binds ws.library, ws.cuda_scratch, ws.cuda_widen
        const MemoryPlan& plan = g.session->plan;
        const int oi = plan.find("ws.optimizer");
        REQUIRE(plan.find("ws.library") >= 0);
        REQUIRE(plan.find("ws.cuda_scratch") >= 0);
        REQUIRE(oi >= 0);
        model_init(g.model, uint64_t(cfg.train.seed));

        CudaOptimContext ctx;
        ctx.stream = dev.stream();
        REQUIRE(cublasCreate(&ctx.cublas) == CUBLAS_STATUS_SUCCESS);
        cublasSetStream(ctx.cublas, ctx.stream);
        ctx.scratch = g.arena.ptr(oi);
        ctx.scratch_bytes = plan.buffers[size_t(oi)].bytes();
        REQUIRE(optimizer_cuda_scratch_bytes(opt, g.slots) <= ctx.scratch_bytes);

        const std::vector<int32_t> stream =
            lcg_stream(2 * cfg.train.batch_size * T + 1, 11, int32_t(cfg.model.vocab_size));
        auto one_step = [&](uint32_t step) {
            model_zero_grads(g.model);
            for (int64_t i = 0; i < accum; ++i) {
                const int32_t* x = stream.data() + ((int64_t(step) - 1) * accum + i) * mb * T;
                model_forward_backward(g.model, x, x + 1, i, step, accum, true);
            }
            model_clip_gradients(g.model, cfg.train.grad_clip);
            OptimStep os;
            os.t = step;
            os.lr = opt.lr;
            os.seed = uint64_t(cfg.train.seed);
            optimizer_step_cuda(opt, g.slots, os, ctx);
            dev.synchronize();
        };
        const cuda::BackendAllocStats before = cuda::backend_alloc_stats();
        one_step(1);
        size_t free_before = 0, free_after = 0, total = 0;
        REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
        one_step(2);
        REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
        const cuda::BackendAllocStats after = cuda::backend_alloc_stats();

        cublasDestroy(ctx.cublas);

        INFO("backend device allocations " << before.device_count << " -> " << after.device_count << " ("
                                           << after.device_bytes - before.device_bytes << " bytes); pinned "
                                           << before.pinned_count << " -> " << after.pinned_count);
        CHECK(after.device_count == before.device_count);
        CHECK(after.pinned_count == before.pinned_count);
        INFO("free device memory before step 2 " << free_before << ", after " << free_after);
        CHECK(free_after >= free_before);
    }
}
