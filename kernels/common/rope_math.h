// Rotary position embedding's element math (RoFormer, Su et al. 2021, in the "rotate half" layout
// of the Hugging Face Llama/Mixtral/OLMoE/Qwen3 models: lane i of a head pairs with lane i + d/2;
// docs/architectures.md), shared by the CPU and CUDA kernels so that both rotate by one rule.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/hd.h"

namespace skew {

/// The rotation angle (radians) of lane pair i (0 <= i < head_dim / 2) at position pos:
/// pos * theta^(-2i / head_dim), in fp32 as the reference computes inv_freq and pos * inv_freq.
SKEW_HD float rope_angle(int64_t pos, int64_t i, int64_t head_dim, float theta) {
    const float inv_freq = 1.0f / powf(theta, float(2 * i) / float(head_dim));
    return float(pos) * inv_freq;
}

/// One lane pair (x_lo = x_i, x_hi = x_{i+d/2}) rotated by the angle whose cosine and sine are c, s:
/// forward (sign 1) x_lo c - x_hi s, x_hi c + x_lo s; sign -1 rotates back (the backward: the
/// transpose of a rotation is its inverse).
SKEW_HD void rope_rotate(float& x_lo, float& x_hi, float c, float s, float sign) {
    const float ss = sign * s;
    const float lo = x_lo * c - x_hi * ss;
    const float hi = x_hi * c + x_lo * ss;
    x_lo = lo;
    x_hi = hi;
}

}  // namespace skew
