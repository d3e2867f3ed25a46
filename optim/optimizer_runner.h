// The optimizer step of one run on its backend, chosen by a factory so that the trainer holds no
// backend-specific code: the CPU loops (optimizer_step) or the CUDA kernels (optimizer_step_cuda)
// with their device scratch bound from the arena's ws.optimizer (sized by the plan from the same
// size model, optim/state_plan.h) and a cuBLAS handle on the backend's stream.
#pragma once
#include <memory>
#include <span>

#include "engine/arena.h"
#include "kernels/backend.h"
#include "optim/optimizer.h"

namespace skew {

/// One optimizer's step over the arena's parameters on one backend.
struct OptimizerRunner {
    virtual ~OptimizerRunner() = default;
    /// Apply one step of the optimizer to `params` (ParamSlots over the arena), asynchronously on
    /// the backend; errors as optimizer_step / optimizer_step_cuda.
    virtual void step(std::span<ParamSlot> params, const OptimStep& step) = 0;
};

/// Checks that `backend` can run optimizer `opt` before a run starts: every optimizer has a CPU and a
/// CUDA step; on CUDA, GaLore's reference form gets a warning (its projector SVDs run on the host,
/// docs/optimizers.md §6.3). Throws skew::Error naming the optimizer where a backend cannot run it.
void require_optimizer_backend(const OptimizerConfig& opt, const Backend& backend);

/// The step of `opt` for `backend` (its name picks the implementation) over `arena` (allocated from
/// a plan for `opt`). Throws skew::Error when the backend cannot run it or a CUDA handle fails; a
/// tensor needing more scratch than the arena's ws.optimizer is refused by its step, named.
std::unique_ptr<OptimizerRunner> make_optimizer_runner(const OptimizerConfig& opt, Backend& backend, const Arena& arena);

}  // namespace skew
