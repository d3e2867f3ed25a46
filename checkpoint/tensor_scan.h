// Scans over named tensors (docs/design.md, "Errors, not crashes"): the first NaN or inf, which a
// checkpoint's loader and the trainer's fault report name by tensor and element, and the tensors
// that are all zero.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/named_tensor.h"

namespace skew {

/// The first non-finite element found: tensor name, flat index, multi-index and value.
struct NonFinite {
    std::string tensor;
    int64_t index = 0;            // flat, row-major
    std::vector<int64_t> coords;  // per dimension
    double value = 0;             // NaN, +inf or -inf
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

}  // namespace skew
