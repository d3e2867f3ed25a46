// Activation formulas shared by the CPU reference and the CUDA kernels: SiLU and its derivative,
// used by the SwiGLU feed-forward w3(silu(w1 x) * w2 x) of docs/design.md ("The paper's model").
// Plain fp32 scalar math, callable from host and device.
#pragma once
#include <cmath>

#include "kernels/common/hd.h"

namespace skew {

/// Logistic sigmoid 1 / (1 + e^-x) in fp32; saturates to 0 or 1 without overflow.
SKEW_HD float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

/// SiLU (swish): x * sigmoid(x).
SKEW_HD float silu_f32(float x) { return x * sigmoid_f32(x); }

/// d silu(x) / dx = sigmoid(x) * (1 + x * (1 - sigmoid(x))).
SKEW_HD float silu_grad_f32(float x) {
    float s = sigmoid_f32(x);
    return s * (1.0f + x * (1.0f - s));
}

}  // namespace skew
