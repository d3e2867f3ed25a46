// The roofline of one backend measured in the same run as the perf cases: its dense GEMM rate
// (Backend::matmul on a big square) and its copy bandwidth (a copy of a big buffer in its memory).
#pragma once
#include <string>

#include "tests/backend_ops/backends.h"

namespace skew::ops {

struct Roofline {
    double flops_per_s = 0.0;  // dense GEMM rate
    std::string gemm;          // what was measured, e.g. "f32 matmul 2048^3"
    double bytes_per_s = 0.0;  // bytes read + written per second by a big copy
    std::string copy;
};

/// Measure the roofline of `b` (a few seconds at most on the CPU).
Roofline measure_roofline(BackendEntry& b);

/// The fraction of the roofline a run of `seconds` reaches: max(flops / peak rate, bytes / peak
/// bandwidth) / seconds (1 = at the roof).
double roofline_fraction(const Roofline& r, double flops, double bytes, double seconds);

}  // namespace skew::ops
