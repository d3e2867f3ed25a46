// Per-element optimizer update math shared by the CPU loops (optim/) and the CUDA kernels
// (kernels/cuda/optim_*.cu): SkewAdam (paper Algorithm 1), AdamW, Lion, Muon's momentum,
// Adafactor, GaLore's subspace Adam, and the fused fp32 weight-decay target. Equations and their
// sources: docs/optimizers.md §2-§7. All arithmetic in fp32; scalars (bias corrections,
// decay factors) are computed by the caller in double and passed as float.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/hd.h"
#include "kernels/common/rounding.h"

namespace skew {

/// 1/sqrt(x) (HF Adafactor's rsqrt); plain division on the host so CPU results are reproducible.
SKEW_HD float optim_rsqrt(float x) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(1.0f, __fsqrt_rn(x));  // as the host: correctly rounded sqrt, then divide
#else
    return 1.0f / sqrtf(x);
#endif
}

/// Exponential moving average s <- beta*s + (1-beta)*x (one_minus_beta passed so the caller
/// controls its rounding, e.g. computed in double).
SKEW_HD float optim_ema(float s, float x, float beta, float one_minus_beta) {
    return rn_add(rn_mul(beta, s), rn_mul(one_minus_beta, x));
}

/// The value rounded back to bf16 (or stored exactly for fp32 params) with decay fused in fp32:
/// w * keep - lr * u, keep = 1 - lr*wd (docs/design.md "Weight decay"). With keep = 1 it is plain w - lr*u.
SKEW_HD float optim_decayed_target(float w, float keep, float lr, float u) {
    return rn_sub(rn_mul(w, keep), rn_mul(lr, u));
}

/// The fp32 value a bf16 weight w32 is rounded to after update u (docs/optimizers.md §9): the fused
/// target optim_decayed_target, or with `premultiply` (weight_decay_mode bf16_premultiply, the paper's
/// trainer `p.mul_(1 - lr*wd)`) w32*keep rounded to nearest bf16 on its own first (skipped when
/// keep == 1), then minus lr*u. The one rule of the CPU loops and every CUDA write kernel.
SKEW_HD float optim_bf16_target(float w32, float keep, float lr, float u, bool premultiply) {
    if (!premultiply) return optim_decayed_target(w32, keep, lr, u);
    const float decayed = keep == 1.0f ? w32 : bf16_to_f32(f32_to_bf16(rn_mul(w32, keep)));
    return rn_sub(decayed, rn_mul(lr, u));
}

/// The bf16 a weight w32 becomes after update u: optim_bf16_target rounded with `mode` and its
/// random word r (bf16_round_bits; r is ignored for nearest rounding).
SKEW_HD bf16 optim_bf16_write(float w32, float keep, float lr, float u, bool premultiply, RoundingMode mode,
                              uint32_t r) {
    return bf16_round_bits(optim_bf16_target(w32, keep, lr, u, premultiply), mode, r);
}

/// Position (matrix, row, col) of flat element i of a stack of (rows x cols) matrices, 64-bit.
struct MatrixCoord {
    int64_t matrix, row, col;
};
SKEW_HD MatrixCoord optim_matrix_coord(int64_t i, int64_t rows, int64_t cols) {
    int64_t per = rows * cols;
    int64_t m = i / per, rem = i - m * per;
    int64_t r = rem / cols;
    return MatrixCoord{m, r, rem - r * cols};
}

// ---- AdamW (PyTorch semantics, docs/optimizers.md §2)

/// One AdamW element: m <- b1 m + (1-b1) g; v <- b2 v + (1-b2) g^2; returns the update
/// U = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps) (eps outside the sqrt, after bias correction).
/// inv_bc1 = 1/(1-b1^t), inv_sqrt_bc2 = 1/sqrt(1-b2^t). Also Muon's internal Adam.
SKEW_HD float adamw_element(float g, float& m, float& v, float b1, float omb1, float b2, float omb2, float inv_bc1,
                            float inv_sqrt_bc2, float eps) {
    m = optim_ema(m, g, b1, omb1);
    v = optim_ema(v, rn_mul(g, g), b2, omb2);
    float denom = rn_add(rn_mul(sqrtf(v), inv_sqrt_bc2), eps);
    return rn_mul(m, inv_bc1) / denom;
}

// ---- Lion (Chen et al. 2023 Alg. 2; lucidrains/automl, docs/optimizers.md §3)

/// sign with sign(0) = 0 (torch.sign); NaN propagates.
SKEW_HD float optim_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }

/// One Lion element: returns U = sign(b1 m + (1-b1) g) (old m), then m <- b2 m + (1-b2) g.
SKEW_HD float lion_element(float g, float& m, float b1, float omb1, float b2, float omb2) {
    float c = optim_ema(m, g, b1, omb1);
    m = optim_ema(m, g, b2, omb2);
    return optim_sign(c);
}

// ---- SkewAdam (paper Algorithm 1; docs/design.md clamps; docs/optimizers.md §7)

/// Numerator with fp32 momentum (backbone tier): m <- b1 m + (1-b1) g; returns coef * m with
/// coef = sqrt(1-b2^t)/(1-b1^t).
SKEW_HD float skewadam_numerator_momentum(float g, float& m, float b1, float omb1, float coef) {
    m = optim_ema(m, g, b1, omb1);
    return rn_mul(coef, m);
}

/// Full second moment (router tier, vectors): v <- b2 v + (1-b2) g^2; returns D = sqrt(max(v, eps)).
SKEW_HD float skewadam_full_denom(float g, float& v, float b2, float omb2, float eps) {
    v = optim_ema(v, rn_mul(g, g), b2, omb2);
    return sqrtf(fmaxf(v, eps));
}

/// Factored row scale sqrt(max(R_i / Rbar, eps)), Rbar = max(mean(R), 1e-15) of this matrix.
SKEW_HD float skewadam_row_scale(float r, float rbar, float eps) { return sqrtf(fmaxf(r / rbar, eps)); }

/// Factored column scale sqrt(max(C_j, eps)).
SKEW_HD float skewadam_col_scale(float c, float eps) { return sqrtf(fmaxf(c, eps)); }

/// The floor of the factored normalizer's mean: 1e-15, as the paper's trainer hard-codes it (docs/optimizers.md §7.1).
constexpr float SKEWADAM_RBAR_FLOOR = 1e-15f;

// ---- Adafactor (HF transformers, scale_parameter=False, relative_step=False, beta1=None; docs/optimizers.md §5)

/// beta2_t = 1 - t^decay_rate (decay_rate = -0.8): 0 at t = 1.
inline double adafactor_beta2(int64_t t, double decay_rate) { return 1.0 - std::pow(double(t), decay_rate); }

/// Unfactored (vectors): v <- b v + (1-b)(g^2 + eps1); returns U = g * rsqrt(v).
SKEW_HD float adafactor_full_element(float g, float& v, float b, float omb, float eps1) {
    v = optim_ema(v, rn_add(rn_mul(g, g), eps1), b, omb);
    return rn_mul(g, optim_rsqrt(v));
}

/// Factored: U = g * rsqrt(R_i / mean(R)) * rsqrt(C_j) (HF `_approx_sq_grad`).
SKEW_HD float adafactor_factored_element(float g, float r, float rmean, float c) {
    return rn_mul(rn_mul(g, optim_rsqrt(r / rmean)), optim_rsqrt(c));
}

// ---- Muon momentum (docs/optimizers.md §4; docs/design.md "Muon")

/// Momentum buffer update: sum form B <- mu B + g (the paper) or EMA form B <- B + (1-mu)(g - B)
/// (Keller Jordan since 2025-02). Returns what Newton-Schulz orthogonalizes: B, or with Nesterov
/// g + mu B (sum form) / g + mu (B - g) (EMA form).
SKEW_HD float muon_momentum_element(float g, float& b, float mu, bool ema, bool nesterov) {
    if (ema) {
        b = rn_add(b, rn_mul(1.0f - mu, rn_sub(g, b)));
        return nesterov ? rn_add(g, rn_mul(mu, rn_sub(b, g))) : b;
    }
    b = rn_add(rn_mul(mu, b), g);
    return nesterov ? rn_add(g, rn_mul(mu, b)) : b;
}

// ---- GaLore subspace Adam (docs/optimizers.md §6)

/// Adam in the projected space without bias correction in the element: m, v EMAs; returns
/// N = m / (sqrt(v) + eps) (eps on the uncorrected sqrt(v)); the caller scales by
/// lr*sqrt(bc2)/bc1 (reference form) or lr (paper form).
SKEW_HD float galore_adam_element(float g, float& m, float& v, float b1, float omb1, float b2, float omb2, float eps) {
    m = optim_ema(m, g, b1, omb1);
    v = optim_ema(v, rn_mul(g, g), b2, omb2);
    return m / rn_add(sqrtf(v), eps);
}

}  // namespace skew
