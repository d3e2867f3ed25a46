// What a training step checks and reports about its own numbers (docs/training.md, "Faults"): the
// tensors a non-finite step scans, gradients that are identically zero after the first step, a
// run that ended on skipped steps, and the NaN the tests inject.
#pragma once
#include <cstdint>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace skew {

/// Testing hook (--debug-inject-nan): element 0 of the last MoE block's router gradient (or the
/// last parameter's gradient in a dense model) becomes NaN, as a numerical fault would leave it.
void inject_nan_gradient(Model& m);

/// What a non-finite step scans for its first culprit: the weights first (a NaN weight makes every
/// gradient NaN, and the weight is the cause), then the gradients, each named as the plan names it.
std::vector<NamedTensor> fault_scan_tensors(const Arena& arena, Backend& backend);

/// After a run's first step: warn naming every trainable tensor whose gradient is identically zero
/// (no gradient path: the loss does not depend on it, so training never changes it).
void warn_zero_gradients(const OptimizerConfig& opt, const Arena& arena, Backend& backend);

/// A run whose last step(s) were skipped for non-finite values did not train to its end: throws
/// skew::Error naming the optimizer and the skipped steps (the checkpoint and metrics are written).
void refuse_trailing_skipped(const OptimizerConfig& opt, int64_t last_step, int64_t trailing_skipped);

}  // namespace skew
