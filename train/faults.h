// Numerical faults (docs/design.md, "Errors, not crashes"): a NaN or inf in the loss or gradient norm
// is reported with the step and the first tensor holding one, and the step is skipped, up to
// train.max_skipped_steps; past that the run stops (with a checkpoint of the last good state).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/tensor_scan.h"  // NamedTensor, NonFinite, first_non_finite

namespace skew {

/// The skip-count policy: at most max_skipped steps are skipped over a run; the next one stops it.
struct SkipPolicy {
    int64_t max_skipped = 10;  // train.max_skipped_steps
    int64_t skipped = 0;       // so far (restored from the checkpoint's skipped_steps on resume)
};

enum class FaultAction : uint8_t { SKIP, STOP };

/// One fault: what was not finite at which step, where, and what the loop must do.
struct FaultReport {
    int64_t step = 0;
    double loss = 0;
    double grad_norm = 0;
    std::optional<NonFinite> first;  // first non-finite element among the scanned tensors
    FaultAction action = FaultAction::SKIP;
    int64_t skipped = 0;  // skipped steps including this one
    int64_t max_skipped = 0;
};

/// Check a step: when loss and grad_norm are finite, return nullopt and do nothing. Otherwise scan
/// `tensors` (the gradients, named by the plan) for the first non-finite element, count the step
/// against the policy and return the report: SKIP (do not apply the update) while skipped <=
/// max_skipped, else STOP.
std::optional<FaultReport> check_step_finite(int64_t step, double loss, double grad_norm,
                                             const std::vector<NamedTensor>& tensors, SkipPolicy& policy);

/// One line for the log / the error: "step 42: non-finite loss (nan), grad norm inf; first
/// non-finite tensor grad.blocks.1.moe.router[3, 17] = nan; step skipped (1 of 10 allowed)".
std::string fault_message(const FaultReport& r);

}  // namespace skew
