// Numerical faults (docs/design.md, "Errors, not crashes"): a NaN or inf in the loss or gradient norm
// is reported with the step and the first tensor holding one, and the step is skipped, up to
// train.max_skipped_steps; past that the run stops (with a checkpoint of the last good state).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/checkpoint.h"  // NamedTensor

namespace skew {

/// The first non-finite element found: tensor name, flat index, multi-index and value.
struct NonFinite {
    std::string tensor;
    int64_t index = 0;                 // flat, row-major
    std::vector<int64_t> coords;       // per dimension
    double value = 0;                  // NaN, +inf or -inf
};

/// Scan tensors in order (BF16 and F32; integer tensors are always finite) and return the first
/// element that is NaN or inf, or nullopt. Device tensors are copied through a bounded host
/// buffer. Cost: one pass over the bytes; call it only after a non-finite loss or grad norm.
std::optional<NonFinite> first_non_finite(const std::vector<NamedTensor>& tensors);

/// The names of the tensors (BF16 and F32) whose every element is exactly zero (+0 or -0), in
/// order. Run over the gradients after a run's first step it names every trainable tensor with no
/// gradient path (a gate that can only be 1, a detached branch). Device tensors are copied
/// through a bounded host buffer; one pass over the bytes.
std::vector<std::string> all_zero_tensors(const std::vector<NamedTensor>& tensors);

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
    int64_t skipped = 0;             // skipped steps including this one
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
