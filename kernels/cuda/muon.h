// Muon on the GPU (docs/optimizers.md "Muon"): momentum, Frobenius normalization and the write-back
// as vectorized kernels; Newton-Schulz as bf16 tensor-core products with fp32 accumulation
// (cuBLASLt strided batches over a chunk of matrices), as Keller Jordan's `zeropower_via_newtonschulz5`
// and the paper's trainer run it. CPU twin: optim/muon.cpp (muon_orthogonalize with bf16 operands).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/optim_kernels.h"

namespace skew::cuda {

/// Scalars of one Muon step on one tensor.
struct MuonArgs {
    float mu = 0.95f;          // momentum
    bool ema = false;          // B <- B + (1-mu)(G - B) instead of B <- mu B + G
    bool nesterov = false;     // U0 = G + mu B (sum) / G + mu (B - G) (EMA); else U0 = B
    int64_t ns_steps = 3;      // Newton-Schulz iterations (3.4445, -4.7750, 2.0315)
    float shape_scale = 1.0f;  // O is multiplied by this before the write
    int64_t max_chunk = 0;     // matrices per strided batch; 0: cuda_ws::muon_chunk_matrices (tests set it)
    float grad_scale = 1.0f;   // the gradient is read as rn_mul(G, grad_scale) (a folded clip coefficient)
};

/// Device scratch (bytes) muon_step needs for n_mat matrices of rows x cols
/// (kernels/cuda/workspace_sizes.h muon_scratch_bytes, the size the memory plan reserves).
int64_t muon_scratch_bytes(int64_t n_mat, int64_t rows, int64_t cols);

/// One Muon step on every matrix of t (n_mat matrices of rows x cols, row-major): per chunk of
/// matrices, B <- momentum(B, G) (fp32, bit-identical to the CPU's muon_momentum_element) and the
/// per-matrix sum of U0^2 (double, fixed partition); X = bf16(U0 / (||U0||_F + 1e-7)); `ns_steps`
/// times A = X X^T, Bm = c1 A + c2 A A, X = c0 X + Bm X with bf16 operands and results, fp32
/// accumulation (X is X^T of the matrix when rows > cols; no transpose is stored: the products
/// take the transposed operand); then W <- round(W*keep - lr*shape_scale*X) with w's rounding (one
/// Philox block per four elements). B: numel fp32. scratch: at least muon_scratch_bytes bytes,
/// 256-byte aligned. Asynchronous on `stream`. Throws skew::Error on a dimension beyond 2^31, too
/// little scratch or a failed launch / cuBLASLt call.
void muon_step(const OptimTensor& t, float* B, const MuonArgs& args, const OptimWrite& w, void* scratch,
               int64_t scratch_bytes, cudaStream_t stream);

}  // namespace skew::cuda
