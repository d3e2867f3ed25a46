// The optimizer step on the CUDA backend as an OptimizerRunner (optim/optimizer_runner.h): the
// kernels of optimizer_step_cuda with their device scratch bound from the arena's ws.optimizer
// (sized by the plan from the same size model, optim/state_plan.h) and a cuBLAS handle on the
// backend's stream. The backend registry makes it (runtime/backend_registry.h).
#pragma once
#include <memory>

#include "engine/arena.h"
#include "kernels/backend.h"
#include "optim/optimizer_runner.h"

namespace skew {

/// What the CUDA step does differently from the CPU's: GaLore's projectors on the host
/// (optim/galore_cuda.h).
inline constexpr OptimizerSupport CUDA_OPTIMIZER_SUPPORT{.galore_projector_on_host = true};

/// The CUDA step of `opt` on `backend` (a backend that runs CUDA: its cuda_stream()) over `arena`
/// (allocated on the device from a plan for `opt`). Throws skew::Error naming the optimizer when the
/// cuBLAS handle cannot be made; a tensor needing more scratch than ws.optimizer is refused by its
/// step, named. Logs the host time of GaLore's projectors after each step that computed them.
std::unique_ptr<OptimizerRunner> make_cuda_optimizer_runner(const OptimizerConfig& opt, Backend& backend,
                                                            const Arena& arena);

}  // namespace skew
