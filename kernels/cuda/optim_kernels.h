// CUDA optimizer kernels, the GPU twins of optim/*.cpp: one fused kernel per tier kind that reads the
// weight, gradient and state once and writes them once (SkewAdam Algorithm 1, AdamW, Lion, Adafactor,
// Muon's momentum and write), the factored row/column reductions and the update-RMS reduction as
// separate deterministic kernels, and Muon's Newton-Schulz on cuBLAS. Per-element math:
// kernels/common/optim_math.h; write-back: kernels/common/rounding.h. Pointers are device memory;
// element counts and offsets are 64-bit.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/common/optim_math.h"

namespace skew::cuda {

/// How a tensor is written back (the CPU's optim_detail::WriteBack): W <- round(W*keep - lr*U) for
/// bf16 weights with `rounding` (RoundingMode: 0 stochastic, 1 dithered, 2 nearest), exact for fp32;
/// premultiply rounds W*keep to nearest first (the paper's trainer). Noise: Philox(seed, ROUNDING,
/// step, tensor, element_base + element): a step over one matrix of a bank (deferred expert
/// gradients) sets element_base to the matrix's first element in the bank, so its noise equals the
/// whole-bank step's (the kernels take 16-byte accesses only when element_base % 4 == 0).
struct OptimWrite {
    uint8_t rounding = 0;
    bool premultiply = false;
    float keep = 1.0f;
    float lr = 0.0f;
    uint64_t seed = 0;
    uint32_t step = 0;
    uint32_t tensor = 0;
    uint64_t element_base = 0;
};

/// The bf16 a weight w32 becomes under `wb` after update u with rounding word r (ignored for
/// nearest): optim_bf16_write (kernels/common/optim_math.h), the CPU's store_update. Host and device.
SKEW_HD bf16 optim_write_bf16(const OptimWrite& wb, float w32, float u, uint32_t r) {
    return optim_bf16_write(w32, wb.keep, wb.lr, u, wb.premultiply, RoundingMode(wb.rounding), r);
}

/// The rounding word of tensor element `element` under `wb`: rounding_bits of element_base + element,
/// 0 for nearest rounding (nothing drawn).
SKEW_HD uint32_t optim_write_word(const OptimWrite& wb, uint64_t element) {
    return wb.rounding == ROUNDING_NEAREST ? 0u : rounding_bits(wb.seed, wb.step, wb.tensor, wb.element_base + element);
}

/// The rounding words of the eight tensor elements from `element` (element_base + element a multiple of
/// 4): the two Philox blocks that serve them, word k of r for element + k, all 0 for nearest rounding.
SKEW_HD void optim_write_words8(const OptimWrite& wb, uint64_t element, uint32_t (&r)[8]) {
    Philox4 b0{{0, 0, 0, 0}}, b1{{0, 0, 0, 0}};
    if (wb.rounding != ROUNDING_NEAREST) {
        const PhiloxKey key{wb.seed, PHILOX_STREAM_ROUNDING};
        const uint64_t group = (wb.element_base + element) >> 2;
        b0 = philox_block(key, wb.step, wb.tensor, group);
        b1 = philox_block(key, wb.step, wb.tensor, group + 1);
    }
    r[0] = b0.v[0], r[1] = b0.v[1], r[2] = b0.v[2], r[3] = b0.v[3];
    r[4] = b1.v[0], r[5] = b1.v[1], r[6] = b1.v[2], r[7] = b1.v[3];
}

/// A parameter tensor on the device: weight (bf16 or fp32) and gradient (bf16 or fp32), numel
/// elements as n_mat matrices of rows x cols (a vector: n_mat 1, rows 1, cols numel).
struct OptimTensor {
    void* weight = nullptr;
    bool weight_f32 = false;
    const void* grad = nullptr;
    bool grad_f32 = false;
    int64_t n_mat = 1, rows = 1, cols = 1;
    float grad_scale = 1.0f;  // the global-norm clip coefficient, applied as G is read (g * grad_scale; 1: exact)
    int64_t numel() const { return n_mat * rows * cols; }
};

/// The second-moment kind of a SkewAdam/Adafactor update kernel.
enum OptimUpdateKind : int {
    OPTIM_SKEWADAM_FACTORED = 0,   // D_ij = sqrt(max(R_i/Rbar, eps)) sqrt(max(C_j, eps))
    OPTIM_SKEWADAM_FULL = 1,       // D = sqrt(max(V, eps)), V updated
    OPTIM_SKEWADAM_NONE = 2,       // D = 1
    OPTIM_ADAFACTOR_FACTORED = 3,  // U = G rsqrt(R_i/mean R) rsqrt(C_j)
    OPTIM_ADAFACTOR_FULL = 4,      // U = G rsqrt(V), V updated with G^2 + eps1
};

/// Scalars and state of one SkewAdam / Adafactor step on one tensor.
struct OptimUpdate {
    int kind = OPTIM_SKEWADAM_FACTORED;
    float* R = nullptr;  // (n_mat, rows) factored row EMA
    float* C = nullptr;  // (n_mat, cols) factored column EMA
    float* M = nullptr;  // (numel) fp32 momentum or nullptr (SkewAdam tiers without momentum)
    float* V = nullptr;  // (numel) full second moment (FULL kinds)
    float b1 = 0.9f, omb1 = 0.1f, b2 = 0.999f, omb2 = 0.001f;
    float coef = 1.0f;              // sqrt(1-b2^t)/(1-b1^t) with momentum, sqrt(1-b2^t) without (SkewAdam)
    float eps = 1e-8f;              // SkewAdam eps clamp; Adafactor eps1 (added to G^2)
    double clip_threshold = 1.0;    // the update-RMS clip d (the CPU divides in fp64 too)
    bool matrix_by_matrix = false;  // RMS and write passes one matrix at a time (the write reads G from L2)
};

/// Device scratch (bytes) optim_skewadam_adafactor_step needs for a tensor: row/column sums, the
/// per-matrix normalizer and clip, per-block RMS partials. 256-byte aligned pieces.
int64_t optim_update_scratch_bytes(const OptimTensor& t);

/// One SkewAdam or Adafactor step on the device: [factored kinds] one read of G for the fp64 row and
/// column sums of G^2 (+eps1), the R, C EMA with the per-matrix normalizer and the row and column
/// scales precomputed once per matrix; the per-matrix sum of U^2 (fixed partition, deterministic);
/// the per-matrix clip max(1, RMS/threshold); then one pass reading W, G, M, V and writing W, M, V
/// with 16-byte accesses (one Philox block per four elements for the rounding). Bytes per element
/// (bf16 W and G, fp32 state): factored 2 (stats) + 2 + 4M (RMS) + 2 + 2 + 8M (write);
/// full 2 + 4 + 4M (RMS) + 2 + 2 + 8 + 8M. Throws skew::Error on a launch failure or an
/// unsupported shape (a factored 1 x n matrix, more than 65535 matrices).
void optim_skewadam_adafactor_step(const OptimTensor& t, const OptimUpdate& u, const OptimWrite& w, void* scratch,
                                   cudaStream_t stream);

/// AdamW, one fused pass (PyTorch semantics): m, v (numel fp32) updated; U = (m/bc1)/(sqrt(v)/sqrt(bc2)+eps).
/// b1, b2 in fp64 as the config holds them: the kernel uses float(b) and float(1 - b), as the CPU
/// loops do (1.0f - float(b) would differ in the last bit). 22 bytes per element (bf16 W and G).
void optim_adamw_step(const OptimTensor& t, float* m, float* v, double b1, double b2, float inv_bc1, float inv_sqrt_bc2,
                      float eps, const OptimWrite& w, cudaStream_t stream);

/// Lion, one fused pass: U = sign(b1 m + (1-b1) g), m <- b2 m + (1-b2) g (b1, b2 in fp64, as AdamW).
/// 14 bytes per element (bf16 W and G).
void optim_lion_step(const OptimTensor& t, float* m, double b1, double b2, const OptimWrite& w, cudaStream_t stream);

}  // namespace skew::cuda
