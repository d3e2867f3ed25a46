// The CUDA optimizer runner (optim/optimizer_runner_cuda.h).
#include "optim/optimizer_runner_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "optim/galore_cuda.h"
#include "optim/optimizer_cuda.h"

namespace skew {
namespace {

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

}  // namespace

std::unique_ptr<OptimizerRunner> make_cuda_optimizer_runner(const OptimizerConfig& opt, Backend& backend,
                                                            const Arena& arena) {
    return std::make_unique<CudaRunner>(opt, backend, arena);
}

}  // namespace skew
