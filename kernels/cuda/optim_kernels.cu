// CUDA optimizer kernels (GPU twins of optim/*.cpp; paper Algorithm 1, docs/optimizers.md §2-§5):
// factored row/column reductions, the per-matrix update-RMS reduction, one fused update-and-write
// kernel per tier kind, AdamW, Lion, Muon's momentum / Newton-Schulz / write. Deterministic: fixed
// partitions and fixed reduction trees, no float atomics.
#include <cuda_runtime.h>

#include <utility>

#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/optim_kernels.h"
#include "engine/cuda_workspace.h"

namespace skew::cuda {

namespace {

constexpr int THREADS = 256;
constexpr int SUMSQ_BLOCKS_PER_MATRIX = cuda_ws::OPTIM_SUMSQ_BLOCKS_PER_MATRIX;  // fixed partition of the per-matrix RMS reduction

template <class G>
__device__ __forceinline__ float load_grad(const G* g, int64_t i) {
    return ld(g[i]);
}

/// W <- round(W*keep - lr*u) (the CPU's optim_detail::store_update).
__device__ __forceinline__ void store_weight(float* w, int64_t i, float u, const OptimWrite& wb) {
    w[i] = optim_decayed_target(w[i], wb.keep, wb.lr, u);
}
__device__ __forceinline__ void store_weight(bf16* w, int64_t i, float u, const OptimWrite& wb) {
    float w32 = bf16_to_f32(w[i]);
    float x;
    if (wb.premultiply) {
        float decayed = wb.keep == 1.0f ? w32 : bf16_to_f32(f32_to_bf16(rn_mul(w32, wb.keep)));
        x = rn_sub(decayed, rn_mul(wb.lr, u));
    } else {
        x = optim_decayed_target(w32, wb.keep, wb.lr, u);
    }
    w[i] = bf16_write_back(x, RoundingMode(wb.rounding), wb.seed, wb.step, wb.tensor, uint64_t(i));
}

// ---- factored reductions

/// Row means of G^2 + add: one block per (row, matrix).
template <class G>
__global__ void row_means_kernel(const G* grad, int64_t rows, int64_t cols, float add, float* rowmean) {
    __shared__ double smem[32];
    const int64_t r = blockIdx.x, e = blockIdx.y;
    const G* g = grad + (e * rows + r) * cols;
    double acc = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        float x = load_grad(g, c);
        acc += double(x * x + add);
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) rowmean[e * rows + r] = float(acc / double(cols));
}

/// Column means of G^2 + add: one thread per (column, matrix) sweeping all rows (coalesced across the warp).
template <class G>
__global__ void col_means_kernel(const G* grad, int64_t rows, int64_t cols, float add, float* colmean) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, e = blockIdx.y;
    if (c >= cols) return;
    const G* g = grad + e * rows * cols + c;
    double acc = 0;
    for (int64_t r = 0; r < rows; ++r) {
        float x = load_grad(g, r * cols);
        acc += double(x * x + add);
    }
    colmean[e * cols + c] = float(acc / double(rows));
}

/// R <- b R + (1-b) rowmean, C <- b C + (1-b) colmean, norm[e] = max(mean(R_e), floor). One block per matrix.
__global__ void factored_ema_kernel(float* R, float* C, const float* rowmean, const float* colmean, int64_t rows,
                                    int64_t cols, float b, float omb, float floor, float* norm) {
    __shared__ double smem[32];
    const int64_t e = blockIdx.x;
    double acc = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        float v = optim_ema(R[e * rows + r], rowmean[e * rows + r], b, omb);
        R[e * rows + r] = v;
        acc += v;
    }
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
        C[e * cols + c] = optim_ema(C[e * cols + c], colmean[e * cols + c], b, omb);
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) norm[e] = fmaxf(float(acc / double(rows)), floor);
}

// ---- the update of one element (shared by the RMS reduction and the fused write)

template <class G>
__device__ __forceinline__ float update_element(const OptimUpdate& u, const G* grad, int64_t i, int64_t e,
                                                int64_t r, int64_t c, int64_t rows, int64_t cols, const float* norm,
                                                float& m_new, float& v_new) {
    const float g = load_grad(grad, i);
    switch (u.kind) {
        case OPTIM_ADAFACTOR_FACTORED:
            return adafactor_factored_element(g, u.R[e * rows + r], norm[e], u.C[e * cols + c]);
        case OPTIM_ADAFACTOR_FULL:
            v_new = u.V[i];
            return adafactor_full_element(g, v_new, u.b2, u.omb2, u.eps);
        default:
            break;
    }
    float num;
    if (u.M) {
        m_new = u.M[i];
        num = skewadam_numerator_momentum(g, m_new, u.b1, u.omb1, u.coef);
    } else {
        num = u.coef * g;
    }
    if (u.kind == OPTIM_SKEWADAM_FACTORED)
        return num / skewadam_row_scale(u.R[e * rows + r], norm[e], u.eps) / skewadam_col_scale(u.C[e * cols + c], u.eps);
    if (u.kind == OPTIM_SKEWADAM_FULL) {
        v_new = u.V[i];
        return num / skewadam_full_denom(g, v_new, u.b2, u.omb2, u.eps);
    }
    return num;
}

/// Per-matrix sum of U^2: block (b, e) covers a fixed slice of matrix e and writes partial[e][b].
template <class G>
__global__ void update_sumsq_kernel(OptimUpdate u, const G* grad, int64_t rows, int64_t cols, const float* norm,
                                    double* partial) {
    __shared__ double smem[32];
    const int64_t e = blockIdx.y, n = rows * cols;
    double acc = 0;
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = k / cols, c = k - r * cols, i = e * n + k;
        float m_new = 0, v_new = 0;
        float x = update_element(u, grad, i, e, r, c, rows, cols, norm, m_new, v_new);
        acc += double(x) * double(x);
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) partial[e * gridDim.x + blockIdx.x] = acc;
}

/// clip[e] = max(1, sqrt(sum_b partial[e][b] / n) / threshold), summed in fixed order.
__global__ void clip_kernel(const double* partial, int blocks, int64_t n_mat, int64_t n, float threshold, float* clip) {
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n_mat) return;
    double s = 0;
    for (int b = 0; b < blocks; ++b) s += partial[e * blocks + b];
    clip[e] = fmaxf(1.0f, float(sqrt(s / double(n))) / threshold);
}

/// The fused pass: reads W, G, M, V (and R, C scales), writes W, M, V once.
template <class W, class G>
__global__ void update_apply_kernel(OptimUpdate u, W* weight, const G* grad, int64_t n_mat, int64_t rows,
                                    int64_t cols, const float* norm, const float* clip, OptimWrite wb) {
    const int64_t n = rows * cols, total = n_mat * n;
    for (int64_t i = thread_index(); i < total; i += grid_stride()) {
        const int64_t e = i / n, k = i - e * n, r = k / cols, c = k - r * cols;
        float m_new = 0, v_new = 0;
        float x = update_element(u, grad, i, e, r, c, rows, cols, norm, m_new, v_new) / clip[e];
        if (u.M && u.kind <= OPTIM_SKEWADAM_NONE) u.M[i] = m_new;
        if (u.kind == OPTIM_SKEWADAM_FULL || u.kind == OPTIM_ADAFACTOR_FULL) u.V[i] = v_new;
        store_weight(weight, i, x, wb);
    }
}

// ---- AdamW, Lion

template <class W, class G>
__global__ void adamw_kernel(W* weight, const G* grad, float* m, float* v, int64_t n, float b1, float omb1, float b2,
                             float omb2, float inv_bc1, float inv_sqrt_bc2, float eps, OptimWrite wb) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        float mi = m[i], vi = v[i];
        float x = adamw_element(load_grad(grad, i), mi, vi, b1, omb1, b2, omb2, inv_bc1, inv_sqrt_bc2, eps);
        m[i] = mi;
        v[i] = vi;
        store_weight(weight, i, x, wb);
    }
}

template <class W, class G>
__global__ void lion_kernel(W* weight, const G* grad, float* m, int64_t n, float b1, float omb1, float b2, float omb2,
                            OptimWrite wb) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        float mi = m[i];
        float x = lion_element(load_grad(grad, i), mi, b1, omb1, b2, omb2);
        m[i] = mi;
        store_weight(weight, i, x, wb);
    }
}

// ---- Muon

/// Momentum of matrix e and the matrix to orthogonalize X (a x b row-major; transposed when tall).
template <class G>
__global__ void muon_momentum_kernel(const G* grad, float* B, float* X, int64_t e, int64_t rows, int64_t cols,
                                     float mu, bool ema, bool nesterov, bool transpose) {
    const int64_t n = rows * cols, base = e * n;
    for (int64_t k = thread_index(); k < n; k += grid_stride()) {
        float b = B[base + k];
        float x = muon_momentum_element(load_grad(grad, base + k), b, mu, ema, nesterov);
        B[base + k] = b;
        if (transpose) {
            const int64_t r = k / cols, c = k - r * cols;
            X[c * rows + r] = x;
        } else {
            X[k] = x;
        }
    }
}

/// out[0] = sum of x^2 over n (one block; fixed tree).
__global__ void sumsq_single_kernel(const float* x, int64_t n, double* out) {
    __shared__ double smem[32];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += double(x[i]) * double(x[i]);
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) out[0] = acc;
}

/// x *= 1 / (sqrt(sumsq) + 1e-7).
__global__ void frobenius_normalize_kernel(float* x, int64_t n, const double* sumsq) {
    const float s = 1.0f / (float(sqrt(*sumsq)) + 1e-7f);
    for (int64_t i = thread_index(); i < n; i += grid_stride()) x[i] *= s;
}

/// dst = alpha * src (n).
__global__ void scaled_copy_kernel(float* dst, const float* src, float alpha, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) dst[i] = alpha * src[i];
}

template <class W>
__global__ void muon_write_kernel(W* weight, const float* X, int64_t e, int64_t rows, int64_t cols, bool transpose,
                                  float scale, OptimWrite wb) {
    const int64_t n = rows * cols, base = e * n;
    for (int64_t k = thread_index(); k < n; k += grid_stride()) {
        const int64_t r = k / cols, c = k - r * cols;
        float o = transpose ? X[c * rows + r] : X[k];
        store_weight(weight, base + k, o * scale, wb);
    }
}

/// Row-major C (m x n) = alpha op(A) op(B) + beta C with cuBLAS (column-major: C^T = op(B)^T op(A)^T).
void gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A,
             const float* B, float beta, float* C) {
    cublas_check(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m), int(k),
                             &alpha, B, tb ? int(k) : int(n), A, ta ? int(m) : int(k), &beta, C, int(n)));
}

using cuda_ws::align256;

// Dispatch over (weight dtype, grad dtype).
template <class F>
void dispatch(const OptimTensor& t, F&& f) {
    if (t.weight_f32) {
        if (t.grad_f32) f(static_cast<float*>(t.weight), static_cast<const float*>(t.grad));
        else f(static_cast<float*>(t.weight), static_cast<const bf16*>(t.grad));
    } else {
        if (t.grad_f32) f(static_cast<bf16*>(t.weight), static_cast<const float*>(t.grad));
        else f(static_cast<bf16*>(t.weight), static_cast<const bf16*>(t.grad));
    }
}

}  // namespace

// ---- launchers

int64_t optim_update_scratch_bytes(const OptimTensor& t) {
    return cuda_ws::optim_update_scratch_bytes(t.n_mat, t.rows, t.cols);
}

void optim_skewadam_adafactor_step(const OptimTensor& t, const OptimUpdate& u, const OptimWrite& w, void* scratch,
                                   cudaStream_t stream) {
    const int64_t rows = t.rows, cols = t.cols, E = t.n_mat;
    if (E > 65535) throw_op_error("optim_skewadam_adafactor_step", "more than 65535 matrices in one tensor");
    char* s = static_cast<char*>(scratch);
    float* rowmean = reinterpret_cast<float*>(s);
    s += align256(4 * E * rows);
    float* colmean = reinterpret_cast<float*>(s);
    s += align256(4 * E * cols);
    float* norm = reinterpret_cast<float*>(s);
    s += align256(4 * E);
    float* clip = reinterpret_cast<float*>(s);
    s += align256(4 * E);
    double* partial = reinterpret_cast<double*>(s);
    const bool factored = u.kind == OPTIM_SKEWADAM_FACTORED || u.kind == OPTIM_ADAFACTOR_FACTORED;
    const bool adafactor = u.kind >= OPTIM_ADAFACTOR_FACTORED;
    dispatch(t, [&](auto* weight, const auto* grad) {
        if (factored) {
            if (rows > 2147483647) throw_op_error("optim_skewadam_adafactor_step", "more than 2^31 rows");
            const float add = adafactor ? u.eps : 0.0f;
            row_means_kernel<<<dim3(unsigned(rows), unsigned(E)), THREADS, 0, stream>>>(grad, rows, cols, add, rowmean);
            cuda_check_kernel("row_means_kernel");
            col_means_kernel<<<dim3(unsigned((cols + THREADS - 1) / THREADS), unsigned(E)), THREADS, 0, stream>>>(
                grad, rows, cols, add, colmean);
            cuda_check_kernel("col_means_kernel");
            factored_ema_kernel<<<unsigned(E), THREADS, 0, stream>>>(u.R, u.C, rowmean, colmean, rows, cols, u.b2,
                                                                     u.omb2, adafactor ? 0.0f : SKEWADAM_RBAR_FLOOR, norm);
            cuda_check_kernel("factored_ema_kernel");
        }
        update_sumsq_kernel<<<dim3(SUMSQ_BLOCKS_PER_MATRIX, unsigned(E)), THREADS, 0, stream>>>(u, grad, rows, cols,
                                                                                               norm, partial);
        cuda_check_kernel("update_sumsq_kernel");
        clip_kernel<<<unsigned((E + 127) / 128), 128, 0, stream>>>(partial, SUMSQ_BLOCKS_PER_MATRIX, E, rows * cols,
                                                                   u.clip_threshold, clip);
        cuda_check_kernel("clip_kernel");
        update_apply_kernel<<<grid_for(t.numel(), THREADS), THREADS, 0, stream>>>(u, weight, grad, E, rows, cols, norm,
                                                                                 clip, w);
        cuda_check_kernel("update_apply_kernel");
    });
}

void optim_adamw_step(const OptimTensor& t, float* m, float* v, float b1, float b2, float inv_bc1, float inv_sqrt_bc2,
                      float eps, const OptimWrite& w, cudaStream_t stream) {
    dispatch(t, [&](auto* weight, const auto* grad) {
        adamw_kernel<<<grid_for(t.numel(), THREADS), THREADS, 0, stream>>>(
            weight, grad, m, v, t.numel(), b1, 1.0f - b1, b2, 1.0f - b2, inv_bc1, inv_sqrt_bc2, eps, w);
        cuda_check_kernel("adamw_kernel");
    });
}

void optim_lion_step(const OptimTensor& t, float* m, float b1, float b2, const OptimWrite& w, cudaStream_t stream) {
    dispatch(t, [&](auto* weight, const auto* grad) {
        lion_kernel<<<grid_for(t.numel(), THREADS), THREADS, 0, stream>>>(weight, grad, m, t.numel(), b1, 1.0f - b1, b2,
                                                                         1.0f - b2, w);
        cuda_check_kernel("lion_kernel");
    });
}

int64_t optim_muon_scratch_bytes(int64_t rows, int64_t cols) {
    return cuda_ws::optim_muon_scratch_bytes(rows, cols);
}

void optim_muon_step(const OptimTensor& t, float* B, float mu, bool ema, bool nesterov, int64_t ns_steps,
                     float shape_scale, const OptimWrite& w, void* scratch, cublasHandle_t handle, cudaStream_t stream) {
    const int64_t rows = t.rows, cols = t.cols, n = rows * cols;
    const bool transpose = rows > cols;
    const int64_t a = transpose ? cols : rows, b = transpose ? rows : cols;
    if (b > 2147483647) throw_op_error("optim_muon_step", "matrix dimension beyond cuBLAS's int range");
    char* s = static_cast<char*>(scratch);
    float* X = reinterpret_cast<float*>(s);
    s += align256(4 * n);
    float* Y = reinterpret_cast<float*>(s);
    s += align256(4 * n);
    float* A = reinterpret_cast<float*>(s);
    s += align256(4 * a * a);
    float* Bm = reinterpret_cast<float*>(s);
    s += align256(4 * a * a);
    double* norm = reinterpret_cast<double*>(s);
    cublas_check(cublasSetStream(handle, stream));
    const float c0 = 3.4445f, c1 = -4.7750f, c2 = 2.0315f;
    dispatch(t, [&](auto* weight, const auto* grad) {
        for (int64_t e = 0; e < t.n_mat; ++e) {
            muon_momentum_kernel<<<grid_for(n, THREADS), THREADS, 0, stream>>>(grad, B, X, e, rows, cols, mu, ema,
                                                                              nesterov, transpose);
            cuda_check_kernel("muon_momentum_kernel");
            sumsq_single_kernel<<<1, 1024, 0, stream>>>(X, n, norm);
            cuda_check_kernel("sumsq_single_kernel");
            frobenius_normalize_kernel<<<grid_for(n, THREADS), THREADS, 0, stream>>>(X, n, norm);
            cuda_check_kernel("frobenius_normalize_kernel");
            for (int64_t k = 0; k < ns_steps; ++k) {
                gemm_rm(handle, false, true, a, a, b, 1.0f, X, X, 0.0f, A);  // A = X X^T
                scaled_copy_kernel<<<grid_for(a * a, THREADS), THREADS, 0, stream>>>(Bm, A, c1, a * a);
                cuda_check_kernel("scaled_copy_kernel");
                gemm_rm(handle, false, false, a, a, a, c2, A, A, 1.0f, Bm);  // B = c1 A + c2 A A
                scaled_copy_kernel<<<grid_for(n, THREADS), THREADS, 0, stream>>>(Y, X, c0, n);
                cuda_check_kernel("scaled_copy_kernel");
                gemm_rm(handle, false, false, a, b, a, 1.0f, Bm, X, 1.0f, Y);  // Y = c0 X + B X
                std::swap(X, Y);
            }
            muon_write_kernel<<<grid_for(n, THREADS), THREADS, 0, stream>>>(weight, X, e, rows, cols, transpose,
                                                                           shape_scale, w);
            cuda_check_kernel("muon_write_kernel");
        }
    });
}

}  // namespace skew::cuda
