// The factory of optimizer steps per backend (optim/optimizer_runner.h).
#include "optim/optimizer_runner.h"

#include <spdlog/spdlog.h>

#include "engine/error.h"

#if defined(SKEW_HAVE_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "optim/galore_cuda.h"
#include "optim/optimizer_cuda.h"
#endif

namespace skew {
namespace {

struct CpuRunner final : OptimizerRunner {
    OptimizerConfig opt;
    explicit CpuRunner(const OptimizerConfig& o) : opt(o) {}
    void step(std::span<ParamSlot> params, const OptimStep& s) override { optimizer_step(opt, params, s); }
};

#if defined(SKEW_HAVE_CUDA)
/// The CUDA step: scratch is the arena's ws.optimizer, the cuBLAS handle (Muon's products) runs on
/// the backend's stream and is destroyed after the stream has drained.
struct CudaRunner final : OptimizerRunner {
    OptimizerConfig opt;
    CudaOptimContext ctx;

    CudaRunner(const OptimizerConfig& o, Backend& be, const Arena& arena) : opt(o) {
        ctx.stream = static_cast<cudaStream_t>(be.cuda_stream());
        // The plan sized ws.optimizer with cuda_optimizer_scratch_bytes (optim/state_plan.h); the step
        // checks each tensor's need against it and refuses, naming the tensor, a plan sized otherwise.
        const MemoryPlan& plan = *arena.plan;
        if (const int wi = plan.find(ws_buffer::OPTIMIZER); wi >= 0) {
            ctx.scratch = arena.ptr(wi);
            ctx.scratch_bytes = plan.buffers[size_t(wi)].bytes();
        }
        if (cublasCreate(&ctx.cublas) != CUBLAS_STATUS_SUCCESS)
            fail("{}: cublasCreate failed for the CUDA optimizer step", o.name);
        cublasSetStream(ctx.cublas, ctx.stream);
    }
    ~CudaRunner() override {
        cudaStreamSynchronize(ctx.stream);
        if (ctx.cublas) cublasDestroy(ctx.cublas);
    }
    CudaRunner(const CudaRunner&) = delete;
    CudaRunner& operator=(const CudaRunner&) = delete;

    void step(std::span<ParamSlot> params, const OptimStep& s) override {
        const double host_ms0 = galore_cuda_projector_host_ms();
        optimizer_step_cuda(opt, params, s, ctx);
        if (const double ms = galore_cuda_projector_host_ms() - host_ms0; ms > 0)
            spdlog::info("{}: step {}: GaLore projectors (SVD) computed on the host in {:.0f} ms", opt.name, s.t, ms);
    }
};
#endif

}  // namespace

void require_optimizer_backend(const OptimizerConfig& opt, const Backend& backend) {
    // Every optimizer has a CUDA step; GaLore's reference form computes its projectors on the host.
    if (backend.device_memory() && optimizer_kind(opt) == OptimizerKind::GALORE)
        spdlog::warn(
            "{}: GaLore's reference form computes an exact SVD of every projected gradient on the host at "
            "step 1 and every {} steps (seconds per 4096 x 4096 matrix); those steps are slow",
            opt.name, opt.update_proj_gap);
}

std::unique_ptr<OptimizerRunner> make_optimizer_runner(const OptimizerConfig& opt, Backend& backend,
                                                       const Arena& arena) {
    if (!arena.plan) fail("{}: the arena has no memory plan", opt.name);
    require_optimizer_backend(opt, backend);
    if (!backend.device_memory()) return std::make_unique<CpuRunner>(opt);
#if defined(SKEW_HAVE_CUDA)
    if (backend.runs_cuda()) return std::make_unique<CudaRunner>(opt, backend, arena);
#endif
    fail("{}: no optimizer step for backend '{}'", opt.name, backend.name());
}

}  // namespace skew
