// The optimizer phase of a training step as named stages, built once per optimizer run from the
// config (docs/architecture.md, "The optimizer phase's stages"): prepare (the idle experts' weights and
// state kept, train.idle_experts: skip), the step (this rank's slots; under ZeRO-1 its owned ranges
// and the weights' all-gather), finish (the deferred expert banks, train.expert_grads: deferred; the
// idle experts put back; the data-parallel weights). A feature adds a stage here, not a branch in
// the step.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "engine/config.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "optim/optimizer_runner.h"
#include "train/data_parallel.h"
#include "train/zero_step.h"

namespace skew {

/// What the stages work on: one optimizer run's model, slots and optimizer (all outlive the stages).
struct OptimizerPhaseParts {
    const OptimizerConfig* opt = nullptr;
    Backend* backend = nullptr;
    Model* model = nullptr;
    OptimizerRunner* optimizer = nullptr;
    std::vector<ParamSlot>* slots = nullptr;  // this rank's slots (empty under ZeRO-1)
    ZeroOptimizer* zero = nullptr;            // ZeRO-1's owned ranges and gather, or null
    Communicator* zero_comm = nullptr;        // where ZeRO-1 gathers (the device communicator, else the host's)
    DataParallel* dp = nullptr;
};

/// One step's inputs to the stages.
struct OptimizerStepInput {
    OptimStep step;                                    // t, lr, seed, grad_scale
    const ExpertTokenCounts* expert_tokens = nullptr;  // the step's tokens per expert, summed over the ranks
};

/// A named stage of the optimizer phase.
struct OptimizerStage {
    std::string name;  // e.g. "idle experts: keep", "step", "deferred experts"
    std::function<void(const OptimizerStepInput&)> run;
};

/// The stages of `cfg`'s optimizer phase over `parts`, in order (see the file comment).
std::vector<OptimizerStage> optimizer_stages(const Config& cfg, const OptimizerPhaseParts& parts);

/// Run `stages` in order for one step.
void run_optimizer_stages(std::span<const OptimizerStage> stages, const OptimizerStepInput& in);

}  // namespace skew
