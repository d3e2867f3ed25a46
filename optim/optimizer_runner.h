// The optimizer step of one run on its backend, behind an interface so that the trainer holds no
// backend-specific code. The backend registry makes the one for a backend
// (runtime/backend_registry.h: make_optimizer_runner): the CPU loops here (optimizer_step), the CUDA
// kernels in optim/ (optimizer_step_cuda); and it says what a backend's step does differently,
// one field per feature (optimizer_support), which the optimizer's checks read instead of asking
// which backend it is.
#pragma once
#include <memory>
#include <span>

#include "optim/optimizer.h"

namespace skew {

/// What a backend's optimizer step does differently from the CPU's, one field per feature that
/// callers branch on. The CPU step is the default-constructed value.
struct OptimizerSupport {
    /// GaLore's projectors (an exact SVD of every projected gradient at step 1 and every
    /// update_proj_gap steps, docs/optimizers.md §6.3) are computed on the host from a copy of the
    /// gradient in device memory: those steps wait for the copies and the SVDs.
    bool galore_projector_on_host = false;
};

/// One optimizer's step over the arena's parameters on one backend.
struct OptimizerRunner {
    virtual ~OptimizerRunner() = default;
    /// Apply one step of the optimizer to `params` (ParamSlots over the arena), asynchronously on
    /// the backend; errors as optimizer_step / optimizer_step_cuda.
    virtual void step(std::span<ParamSlot> params, const OptimStep& step) = 0;
};

/// Checks that a backend whose step does what `support` says can run optimizer `opt`, before a run
/// starts: every optimizer has a step on every backend; GaLore's reference form gets a warning
/// where its projectors are computed on the host (OptimizerSupport::galore_projector_on_host).
void require_optimizer_backend(const OptimizerConfig& opt, const OptimizerSupport& support);

/// The CPU step of `opt` (optimizer_step over host memory), for a backend whose memory is the host's.
std::unique_ptr<OptimizerRunner> make_cpu_optimizer_runner(const OptimizerConfig& opt);

}  // namespace skew
