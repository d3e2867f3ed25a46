// A training step's checks of its own numbers (train/step_checks.h).
#include "train/step_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cmath>

#include "engine/error.h"
#include "train/faults.h"

namespace skew {

/// Testing hook (--debug-inject-nan): element 0 of the last MoE block's router gradient (or the
/// last parameter's gradient in a dense model) becomes NaN, as a numerical fault would leave it.
void inject_nan_gradient(Model& m) {
    const ParamRef* target = &m.params.back();
    for (const ParamRef& p : m.params)
        if (p.info->role == Role::ROUTER) target = &p;
    if (target->grad.type == ScalarType::F32) {
        const float nan = std::nanf("");
        m.backend->copy_to_device(target->grad.data, &nan, sizeof(nan));
    } else {
        const bf16 nan = f32_to_bf16(std::nanf(""));
        m.backend->copy_to_device(target->grad.data, &nan, sizeof(nan));
    }
}

/// What a non-finite step scans for its first culprit: the weights first (a NaN weight makes every
/// gradient NaN, and the weight is the cause), then the gradients, each named as the plan names it.
std::vector<NamedTensor> fault_scan_tensors(const Arena& arena, Backend& backend) {
    std::vector<NamedTensor> t = buffer_tensors(arena, BufferKind::WEIGHT, &backend);
    for (NamedTensor& g : buffer_tensors(arena, BufferKind::GRAD, &backend)) t.push_back(std::move(g));
    return t;
}

/// After a run's first step: warn naming every trainable tensor whose gradient is identically zero
/// (no gradient path: the loss does not depend on it, so training never changes it).
void warn_zero_gradients(const OptimizerConfig& opt, const Arena& arena, Backend& backend) {
    const std::vector<std::string> zero = all_zero_tensors(buffer_tensors(arena, BufferKind::GRAD, &backend));
    if (!zero.empty())
        spdlog::warn(
            "{}: after step 1 the gradient of {} is identically zero: no gradient path reaches {} (check the "
            "model settings, e.g. top_k, or the loss coefficients)",
            opt.name, fmt::join(zero, ", "), zero.size() == 1 ? "it" : "them");
}

/// A run whose last step(s) were skipped for non-finite values did not train to its end: throws
/// skew::Error naming the optimizer and the skipped steps (the checkpoint and metrics are written).
void refuse_trailing_skipped(const OptimizerConfig& opt, int64_t last_step, int64_t trailing_skipped) {
    if (trailing_skipped == 0) return;
    fail(
        "{}: the run ended with {} step(s) skipped for non-finite values (steps {} to {}), so its last updates never "
        "happened; see the step log for the first non-finite tensor (lower the learning rate, or resume from the best "
        "checkpoint)",
        opt.name, trailing_skipped, last_step - trailing_skipped + 1, last_step);
}

}  // namespace skew
