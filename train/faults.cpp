// The skip-count policy for NaN/inf steps (train.max_skipped_steps) and its report; the scans are
// checkpoint/tensor_scan.h's.
#include "train/faults.h"

#include <fmt/format.h>

#include <cmath>

namespace skew {

namespace {

std::string number(double v) {
    return std::isnan(v) ? "nan" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : fmt::format("{:.6g}", v);
}

}  // namespace

std::optional<FaultReport> check_step_finite(int64_t step, double loss, double grad_norm,
                                             const std::vector<NamedTensor>& tensors, SkipPolicy& policy) {
    if (std::isfinite(loss) && std::isfinite(grad_norm)) return std::nullopt;
    FaultReport r;
    r.step = step;
    r.loss = loss;
    r.grad_norm = grad_norm;
    r.first = first_non_finite(tensors);
    policy.skipped += 1;
    r.skipped = policy.skipped;
    r.max_skipped = policy.max_skipped;
    r.action = policy.skipped <= policy.max_skipped ? FaultAction::SKIP : FaultAction::STOP;
    return r;
}

std::string fault_message(const FaultReport& r) {
    std::string what = std::isfinite(r.loss)
                           ? fmt::format("non-finite grad norm ({}), loss {}", number(r.grad_norm), number(r.loss))
                           : fmt::format("non-finite loss ({}), grad norm {}", number(r.loss), number(r.grad_norm));
    std::string where;
    if (r.first) {
        where = fmt::format("first non-finite tensor {}{} = {}", r.first->tensor, shape_text(r.first->coords),
                            number(r.first->value));
    } else {
        where = "no scanned tensor holds a non-finite value (the loss itself overflowed)";
    }
    std::string action = r.action == FaultAction::SKIP
                             ? fmt::format("step skipped ({} of {} allowed)", r.skipped, r.max_skipped)
                             : fmt::format("stopping: {} non-finite steps exceed train.max_skipped_steps = {}",
                                           r.skipped, r.max_skipped);
    return fmt::format("step {}: {}; {}; {}", r.step, what, where, action);
}

}  // namespace skew
