// CUDA optimizer kernels (GPU twins of optim/*.cpp; paper Algorithm 1, docs/optimizers.md §2-§5):
// factored row/column reductions, the per-matrix update-RMS reduction, one fused update-and-write
// kernel per tier kind, AdamW, Lion, Muon's momentum / Newton-Schulz / write. Deterministic: fixed
// partitions and fixed reduction trees, no float atomics.
#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/optim_kernels.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int THREADS = 256;
constexpr int VEC = 8;  // elements per thread and work item: 16 bytes of bf16
constexpr int64_t SEG = cuda_ws::OPTIM_SEG_COLS;
static_assert(SEG == THREADS * VEC, "a work item is one block of 8-element vectors");
static_assert(cuda_ws::OPTIM_WARP_COLS == 32 * VEC, "a warp column tile is one warp of 8-element vectors");

// ---- 16-byte vector access: 8 elements widened to fp32 registers (statically indexed only)

__device__ __forceinline__ void ld8(const bf16* p, float (&x)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    x[0] = __uint_as_float(u.x << 16), x[1] = __uint_as_float(u.x & 0xFFFF0000u);
    x[2] = __uint_as_float(u.y << 16), x[3] = __uint_as_float(u.y & 0xFFFF0000u);
    x[4] = __uint_as_float(u.z << 16), x[5] = __uint_as_float(u.z & 0xFFFF0000u);
    x[6] = __uint_as_float(u.w << 16), x[7] = __uint_as_float(u.w & 0xFFFF0000u);
}
__device__ __forceinline__ void ld8(const float* p, float (&x)[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
__device__ __forceinline__ void st8(float* p, const float (&x)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}
__device__ __forceinline__ void st8(bf16* p, const bf16 (&h)[8]) {
    uint4 u;
    u.x = uint32_t(h[0].bits) | (uint32_t(h[1].bits) << 16);
    u.y = uint32_t(h[2].bits) | (uint32_t(h[3].bits) << 16);
    u.z = uint32_t(h[4].bits) | (uint32_t(h[5].bits) << 16);
    u.w = uint32_t(h[6].bits) | (uint32_t(h[7].bits) << 16);
    *reinterpret_cast<uint4*>(p) = u;
}

/// The gradient as read by the optimizer: g * grad_scale (the folded clip coefficient; exact for 1).
template <class G>
__device__ __forceinline__ float ld_grad(const G* g, int64_t i, float gs) {
    return rn_mul(ld(g[i]), gs);
}
template <class G>
__device__ __forceinline__ void ld8_grad(const G* g, float gs, float (&x)[8]) {
    ld8(g, x);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = rn_mul(x[k], gs);
}

// ---- write-back (the CPU's optim_detail::store_update)

/// One element: W[i] <- round(W*keep - lr*u) (fp32 weights exactly).
__device__ __forceinline__ void write1(float* w, int64_t i, float u, const OptimWrite& wb) {
    w[i] = optim_decayed_target(w[i], wb.keep, wb.lr, u);
}
__device__ __forceinline__ void write1(bf16* w, int64_t i, float u, const OptimWrite& wb) {
    w[i] = optim_write_bf16(wb, bf16_to_f32(w[i]), u, optim_write_word(wb, uint64_t(i)));
}

/// Eight elements at i0 (a multiple of 4, 16-byte aligned; wb.element_base a multiple of 4 too):
/// two Philox blocks serve the eight words.
__device__ __forceinline__ void write8(float* w, int64_t i0, const float (&u)[8], const OptimWrite& wb) {
    float x[8];
    ld8(w + i0, x);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = optim_decayed_target(x[k], wb.keep, wb.lr, u[k]);
    st8(w + i0, x);
}
__device__ __forceinline__ void write8(bf16* w, int64_t i0, const float (&u)[8], const OptimWrite& wb) {
    float x[8];
    ld8(w + i0, x);
    uint32_t r[8];
    optim_write_words8(wb, uint64_t(i0), r);
    bf16 h[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) h[k] = optim_write_bf16(wb, x[k], u[k], r[k]);
    st8(w + i0, h);
}

// ---- the update of one element, by kind (template: no per-element switch)

struct UpdateArgs {
    float b1, omb1, b2, omb2, coef, eps;
};

/// U of one element before the clip; m, v in/out (state read before, written after when kept).
/// rs, cs: the precomputed row and column scales of the factored kinds.
template <int K, bool MOM>
__device__ __forceinline__ float update_of(const UpdateArgs& a, float g, float& m, float& v, float rs, float cs) {
    if constexpr (K == OPTIM_ADAFACTOR_FACTORED) {
        return rn_mul(rn_mul(g, rs), cs);  // adafactor_factored_element with its rsqrt factors precomputed
    } else if constexpr (K == OPTIM_ADAFACTOR_FULL) {
        return adafactor_full_element(g, v, a.b2, a.omb2, a.eps);
    } else {
        const float num = MOM ? skewadam_numerator_momentum(g, m, a.b1, a.omb1, a.coef) : rn_mul(a.coef, g);
        if constexpr (K == OPTIM_SKEWADAM_FACTORED) return num / rs / cs;
        if constexpr (K == OPTIM_SKEWADAM_FULL) return num / skewadam_full_denom(g, v, a.b2, a.omb2, a.eps);
        return num;
    }
}

template <int K>
constexpr bool kind_factored() {
    return K == OPTIM_SKEWADAM_FACTORED || K == OPTIM_ADAFACTOR_FACTORED;
}
template <int K>
constexpr bool kind_full() {
    return K == OPTIM_SKEWADAM_FULL || K == OPTIM_ADAFACTOR_FULL;
}

/// Eight (or, at a row's ragged end or on the unaligned path, fewer) updates of work item
/// (matrix e, row r, columns c..c+7), flat index i0. Reads G, M, V and the scales; with WRITE
/// also writes M, V and the weight (after dividing by clip), otherwise returns sum U^2 in fp64.
template <int K, bool MOM, bool WRITE, class W, class G>
__device__ __forceinline__ double update_item(const UpdateArgs& a, W* weight, const G* grad, float gs, float* M,
                                              float* V, const float* colscale, float rs, float clip, int64_t i0,
                                              int64_t c, int64_t cols, bool vec, const OptimWrite& wb) {
    double acc = 0;
    if (vec && c + VEC <= cols) {
        float g[8], m[8] = {}, v[8] = {}, cs[8] = {}, u[8];
        ld8_grad(grad + i0, gs, g);
        if constexpr (MOM) ld8(M + i0, m);
        if constexpr (kind_full<K>()) ld8(V + i0, v);
        if constexpr (kind_factored<K>()) ld8(colscale + c, cs);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            u[k] = update_of<K, MOM>(a, g[k], m[k], v[k], rs, kind_factored<K>() ? cs[k] : 1.0f);
            if constexpr (WRITE) u[k] = u[k] / clip;
            else acc += double(u[k]) * double(u[k]);
        }
        if constexpr (WRITE) {
            if constexpr (MOM) st8(M + i0, m);
            if constexpr (kind_full<K>()) st8(V + i0, v);
            write8(weight, i0, u, wb);
        }
        return acc;
    }
    const int64_t nv = cols - c < VEC ? cols - c : VEC;
    for (int64_t k = 0; k < nv; ++k) {
        const int64_t i = i0 + k;
        float m = MOM ? M[i] : 0.0f, v = kind_full<K>() ? V[i] : 0.0f;
        float u = update_of<K, MOM>(a, ld_grad(grad, i, gs), m, v, rs, kind_factored<K>() ? colscale[c + k] : 1.0f);
        if constexpr (WRITE) {
            if constexpr (MOM) M[i] = m;
            if constexpr (kind_full<K>()) V[i] = v;
            write1(weight, i, u / clip, wb);
        } else {
            acc += double(u) * double(u);
        }
    }
    return acc;
}

// ---- factored statistics: one read of G gives row and column sums of G^2 (+add)

/// Block (row tile rt, 2048-column segment ct) of matrix blockIdx.y: each thread owns 8 columns and
/// sums their (g^2 + add) over the tile's rows in fp64 registers (column partials, written once per
/// tile); each warp reduces every row over its 256 columns (row partials, one per warp tile).
/// Deterministic: fixed tiles, fixed shuffle trees.
template <class G>
__global__ void factored_stats_kernel(const G* __restrict__ grad, float gs, int64_t rows, int64_t cols, float add,
                                      int64_t col_segs, int64_t tile_rows, int64_t row_tiles, int64_t n_wct, bool vec,
                                      double* __restrict__ rowpart, double* __restrict__ colpart) {
    const int64_t e = blockIdx.y, ct = int64_t(blockIdx.x) % col_segs, rt = int64_t(blockIdx.x) / col_segs;
    const int lane = threadIdx.x & 31;
    const int64_t wct = ct * (THREADS / 32) + (threadIdx.x >> 5);
    const int64_t c = ct * SEG + int64_t(threadIdx.x) * VEC;
    const int64_t nv = c >= cols ? 0 : (cols - c < VEC ? cols - c : VEC);
    const int64_t r0 = rt * tile_rows, r1 = r0 + tile_rows < rows ? r0 + tile_rows : rows;
    const G* g_mat = grad + e * rows * cols;
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t r = r0; r < r1; ++r) {
        float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        const G* g = g_mat + r * cols + c;
        if (vec && nv == VEC) {
            ld8_grad(g, gs, x);
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k)
                if (k < nv) x[k] = ld_grad(g, k, gs);
        }
        double row = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            if (k < nv) {
                const double q = double(rn_add(rn_mul(x[k], x[k]), add));
                acc[k] += q;
                row += q;
            }
        }
        row = warp_sum(row);
        if (lane == 0 && wct < n_wct) rowpart[(e * n_wct + wct) * rows + r] = row;
    }
    double* cp = colpart + (e * row_tiles + rt) * cols + c;
#pragma unroll
    for (int k = 0; k < 8; ++k)
        if (k < nv) cp[k] = acc[k];
}

/// One block per matrix: R <- b R + (1-b) rowmean (rowmean from the warp-tile partials, in order),
/// the matrix's normalizer (SkewAdam: Rbar = max(mean R, 1e-15); Adafactor: mean R), then the row
/// scales: SkewAdam sqrt(max(R/Rbar, eps)), Adafactor rsqrt(R/mean R).
__global__ void factored_rows_kernel(float* __restrict__ R, const double* __restrict__ rowpart, int64_t rows,
                                     int64_t cols, int64_t n_wct, float b, float omb, float eps, bool adafactor,
                                     float* __restrict__ rowscale) {
    __shared__ double smem[32];
    const int64_t e = blockIdx.x;
    float* Re = R + e * rows;
    double acc = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        double s = 0;
        for (int64_t t = 0; t < n_wct; ++t) s += rowpart[(e * n_wct + t) * rows + r];
        const float v = optim_ema(Re[r], float(s / double(cols)), b, omb);
        Re[r] = v;
        acc += v;
    }
    acc = block_sum(acc, smem);
    const float mean = float(acc / double(rows));
    const float norm = adafactor ? mean : fmaxf(mean, SKEWADAM_RBAR_FLOOR);
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        rowscale[e * rows + r] = adafactor ? optim_rsqrt(Re[r] / norm) : skewadam_row_scale(Re[r], norm, eps);
}

/// One thread per (column, matrix): C <- b C + (1-b) colmean (row-tile partials summed in order),
/// then the column scale: SkewAdam sqrt(max(C, eps)), Adafactor rsqrt(C).
__global__ void factored_cols_kernel(float* __restrict__ C, const double* __restrict__ colpart, int64_t rows,
                                     int64_t cols, int64_t row_tiles, float b, float omb, float eps, bool adafactor,
                                     float* __restrict__ colscale) {
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, e = blockIdx.y;
    if (c >= cols) return;
    double s = 0;
    for (int64_t t = 0; t < row_tiles; ++t) s += colpart[(e * row_tiles + t) * cols + c];
    const float v = optim_ema(C[e * cols + c], float(s / double(rows)), b, omb);
    C[e * cols + c] = v;
    colscale[e * cols + c] = adafactor ? optim_rsqrt(v) : skewadam_col_scale(v, eps);
}

// ---- the update-RMS pass and the write pass over (matrix, row, 2048-column segment) items

/// Block (b, y) sums U^2 over items b, b + gridDim.x, ... of matrix e = e0 + y into partial[e][b] (fp64).
template <int K, bool MOM, class G>
__global__ void update_sumsq_kernel(UpdateArgs a, const G* __restrict__ grad, float gs, const float* __restrict__ M,
                                    const float* __restrict__ V, const float* __restrict__ rowscale,
                                    const float* __restrict__ colscale, int64_t rows, int64_t cols, bool vec,
                                    int64_t e0, double* __restrict__ partial) {
    __shared__ double smem[32];
    const int64_t e = e0 + blockIdx.y, segs = (cols + SEG - 1) / SEG, items = rows * segs;
    const float* cs = kind_factored<K>() ? colscale + e * cols : nullptr;
    double acc = 0;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        const int64_t r = it / segs, c = (it - r * segs) * SEG + int64_t(threadIdx.x) * VEC;
        if (c >= cols) continue;
        const float rs = kind_factored<K>() ? rowscale[e * rows + r] : 1.0f;
        acc += update_item<K, MOM, false>(a, static_cast<float*>(nullptr), grad, gs, const_cast<float*>(M),
                                          const_cast<float*>(V), cs, rs, 1.0f, (e * rows + r) * cols + c, c, cols, vec,
                                          OptimWrite{});
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) partial[e * gridDim.x + blockIdx.x] = acc;
}

/// clip[e] = max(1, sqrt(sum_b partial[e][b] / n) / threshold): one block per matrix, fixed tree.
__global__ void clip_kernel(const double* __restrict__ partial, int64_t blocks, int64_t n, double threshold, int64_t e0,
                            float* __restrict__ clip) {
    __shared__ double smem[32];
    const int64_t e = e0 + blockIdx.x;
    double s = 0;
    for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[e * blocks + b];
    s = block_sum(s, smem);
    if (threadIdx.x == 0) clip[e] = fmaxf(1.0f, float(sqrt(s / double(n)) / threshold));
}

/// The write pass: reads W, G, M, V and the scales, writes W, M, V once (16-byte accesses).
template <int K, bool MOM, class W, class G>
__global__ void update_apply_kernel(UpdateArgs a, W* __restrict__ weight, const G* __restrict__ grad, float gs,
                                    float* __restrict__ M, float* __restrict__ V, const float* __restrict__ rowscale,
                                    const float* __restrict__ colscale, const float* __restrict__ clip, int64_t rows,
                                    int64_t cols, bool vec, int64_t e0, OptimWrite wb) {
    const int64_t e = e0 + blockIdx.y, segs = (cols + SEG - 1) / SEG, items = rows * segs;
    const float* cs = kind_factored<K>() ? colscale + e * cols : nullptr;
    const float cl = clip[e];
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        const int64_t r = it / segs, c = (it - r * segs) * SEG + int64_t(threadIdx.x) * VEC;
        if (c >= cols) continue;
        const float rs = kind_factored<K>() ? rowscale[e * rows + r] : 1.0f;
        update_item<K, MOM, true>(a, weight, grad, gs, M, V, cs, rs, cl, (e * rows + r) * cols + c, c, cols, vec, wb);
    }
}

// ---- AdamW, Lion: one pass, 8 elements per thread and iteration

template <class W, class G>
__global__ void adamw_kernel(W* __restrict__ weight, const G* __restrict__ grad, float gs, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, bool vec, float b1, float omb1, float b2, float omb2,
                             float inv_bc1, float inv_sqrt_bc2, float eps, OptimWrite wb) {
    const int64_t n_vec = vec ? n / VEC : 0;
    for (int64_t j = thread_index(); j < n_vec; j += grid_stride()) {
        const int64_t i0 = j * VEC;
        float g[8], mm[8], vv[8], u[8];
        ld8_grad(grad + i0, gs, g);
        ld8(m + i0, mm);
        ld8(v + i0, vv);
#pragma unroll
        for (int k = 0; k < 8; ++k)
            u[k] = adamw_element(g[k], mm[k], vv[k], b1, omb1, b2, omb2, inv_bc1, inv_sqrt_bc2, eps);
        st8(m + i0, mm);
        st8(v + i0, vv);
        write8(weight, i0, u, wb);
    }
    for (int64_t i = n_vec * VEC + thread_index(); i < n; i += grid_stride()) {
        float mi = m[i], vi = v[i];
        const float u = adamw_element(ld_grad(grad, i, gs), mi, vi, b1, omb1, b2, omb2, inv_bc1, inv_sqrt_bc2, eps);
        m[i] = mi;
        v[i] = vi;
        write1(weight, i, u, wb);
    }
}

template <class W, class G>
__global__ void lion_kernel(W* __restrict__ weight, const G* __restrict__ grad, float gs, float* __restrict__ m,
                            int64_t n, bool vec, float b1, float omb1, float b2, float omb2, OptimWrite wb) {
    const int64_t n_vec = vec ? n / VEC : 0;
    for (int64_t j = thread_index(); j < n_vec; j += grid_stride()) {
        const int64_t i0 = j * VEC;
        float g[8], mm[8], u[8];
        ld8_grad(grad + i0, gs, g);
        ld8(m + i0, mm);
#pragma unroll
        for (int k = 0; k < 8; ++k) u[k] = lion_element(g[k], mm[k], b1, omb1, b2, omb2);
        st8(m + i0, mm);
        write8(weight, i0, u, wb);
    }
    for (int64_t i = n_vec * VEC + thread_index(); i < n; i += grid_stride()) {
        float mi = m[i];
        const float u = lion_element(ld_grad(grad, i, gs), mi, b1, omb1, b2, omb2);
        m[i] = mi;
        write1(weight, i, u, wb);
    }
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

namespace {

/// Launch the RMS and write passes of kind K (momentum MOM) on one tensor: over all matrices at once,
/// or with u.matrix_by_matrix one matrix at a time (RMS, clip, write), so that the write pass finds
/// the matrix's G still in L2. Same values either way.
template <int K, bool MOM, class W, class G>
void launch_update(const OptimTensor& t, const OptimUpdate& u, const UpdateArgs& a, W* weight, const G* grad, bool vec,
                   const float* rowscale, const float* colscale, float* clip, double* partial, const OptimWrite& w,
                   cudaStream_t stream) {
    const int64_t blocks = cuda_ws::optim_update_blocks(t.rows, t.cols);
    const int64_t step = u.matrix_by_matrix ? 1 : t.n_mat;
    for (int64_t e0 = 0; e0 < t.n_mat; e0 += step) {
        const int64_t count = std::min(step, t.n_mat - e0);
        const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(count));
        update_sumsq_kernel<K, MOM, G><<<grid, THREADS, 0, stream>>>(a, grad, t.grad_scale, u.M, u.V, rowscale,
                                                                     colscale, t.rows, t.cols, vec, e0, partial);
        cuda_check_kernel("update_sumsq_kernel");
        clip_kernel<<<unsigned(count), THREADS, 0, stream>>>(partial, blocks, t.rows * t.cols, u.clip_threshold, e0,
                                                             clip);
        cuda_check_kernel("clip_kernel");
        update_apply_kernel<K, MOM, W, G><<<grid, THREADS, 0, stream>>>(
            a, weight, grad, t.grad_scale, u.M, u.V, rowscale, colscale, clip, t.rows, t.cols, vec, e0, w);
        cuda_check_kernel("update_apply_kernel");
    }
}

template <class W, class G>
void launch_update_kind(const OptimTensor& t, const OptimUpdate& u, const UpdateArgs& a, W* weight, const G* grad,
                        bool vec, const float* rowscale, const float* colscale, float* clip, double* partial,
                        const OptimWrite& w, cudaStream_t stream) {
    const bool mom = u.M != nullptr;
#define SKEW_OPTIM_LAUNCH(K, MOM) \
    launch_update<K, MOM>(t, u, a, weight, grad, vec, rowscale, colscale, clip, partial, w, stream)
    switch (u.kind) {
        case OPTIM_SKEWADAM_FACTORED:
            if (mom) SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_FACTORED, true);
            else SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_FACTORED, false);
            break;
        case OPTIM_SKEWADAM_FULL:
            if (mom) SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_FULL, true);
            else SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_FULL, false);
            break;
        case OPTIM_SKEWADAM_NONE:
            if (mom) SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_NONE, true);
            else SKEW_OPTIM_LAUNCH(OPTIM_SKEWADAM_NONE, false);
            break;
        case OPTIM_ADAFACTOR_FACTORED: SKEW_OPTIM_LAUNCH(OPTIM_ADAFACTOR_FACTORED, false); break;
        case OPTIM_ADAFACTOR_FULL: SKEW_OPTIM_LAUNCH(OPTIM_ADAFACTOR_FULL, false); break;
        default: throw_op_error("optim_skewadam_adafactor_step", "unknown update kind");
    }
#undef SKEW_OPTIM_LAUNCH
}

}  // namespace

void optim_skewadam_adafactor_step(const OptimTensor& t, const OptimUpdate& u, const OptimWrite& w, void* scratch,
                                   cudaStream_t stream) {
    const int64_t rows = t.rows, cols = t.cols, E = t.n_mat;
    if (E > 65535) throw_op_error("optim_skewadam_adafactor_step", "more than 65535 matrices in one tensor");
    const bool factored = u.kind == OPTIM_SKEWADAM_FACTORED || u.kind == OPTIM_ADAFACTOR_FACTORED;
    const bool adafactor = u.kind >= OPTIM_ADAFACTOR_FACTORED;
    if (factored && E == 1 && rows == 1)
        throw_op_error("optim_skewadam_adafactor_step",
                       "factored statistics of a single 1-row matrix (use a full second moment)");
    if (u.kind == OPTIM_ADAFACTOR_FACTORED && u.M)
        throw_op_error("optim_skewadam_adafactor_step", "Adafactor keeps no momentum (beta1 = None)");
    // Scratch layout: cuda_ws::optim_update_scratch_bytes.
    char* s = static_cast<char*>(scratch);
    float* clip = reinterpret_cast<float*>(s);
    s += align256(4 * E);
    double* partial = reinterpret_cast<double*>(s);
    s += align256(8 * E * cuda_ws::optim_update_blocks(rows, cols));
    double* rowpart = reinterpret_cast<double*>(s);
    float *rowscale = nullptr, *colscale = nullptr;
    double* colpart = nullptr;
    const int64_t row_tiles = cuda_ws::optim_row_tiles(rows), col_segs = (cols + SEG - 1) / SEG;
    const int64_t n_wct = cuda_ws::optim_warp_col_tiles(cols);
    if (factored) {
        s += align256(8 * E * n_wct * rows);
        colpart = reinterpret_cast<double*>(s);
        s += align256(8 * E * row_tiles * cols);
        rowscale = reinterpret_cast<float*>(s);
        s += align256(4 * E * rows);
        colscale = reinterpret_cast<float*>(s);
    }
    UpdateArgs a{u.b1, u.omb1, u.b2, u.omb2, u.coef, u.eps};
    dispatch(t, [&](auto* weight, const auto* grad) {
        // 16-byte accesses: every pointer aligned and every item's first element a multiple of 8.
        const bool vec =
            aligned16(weight, grad, u.M, u.V) && (cols % VEC == 0 || (E == 1 && rows == 1)) && w.element_base % 4 == 0;
        if (factored) {
            if (row_tiles * col_segs > 2147483647) throw_op_error("optim_skewadam_adafactor_step", "matrix too large");
            const float add = adafactor ? u.eps : 0.0f;
            factored_stats_kernel<<<dim3(unsigned(row_tiles * col_segs), unsigned(E)), THREADS, 0, stream>>>(
                grad, t.grad_scale, rows, cols, add, col_segs, cuda_ws::optim_tile_rows(rows), row_tiles, n_wct, vec,
                rowpart, colpart);
            cuda_check_kernel("factored_stats_kernel");
            factored_rows_kernel<<<unsigned(E), THREADS, 0, stream>>>(u.R, rowpart, rows, cols, n_wct, u.b2, u.omb2,
                                                                      u.eps, adafactor, rowscale);
            cuda_check_kernel("factored_rows_kernel");
            factored_cols_kernel<<<dim3(unsigned((cols + THREADS - 1) / THREADS), unsigned(E)), THREADS, 0, stream>>>(
                u.C, colpart, rows, cols, row_tiles, u.b2, u.omb2, u.eps, adafactor, colscale);
            cuda_check_kernel("factored_cols_kernel");
        }
        launch_update_kind(t, u, a, weight, grad, vec, rowscale, colscale, clip, partial, w, stream);
    });
}

void optim_adamw_step(const OptimTensor& t, float* m, float* v, double b1, double b2, float inv_bc1, float inv_sqrt_bc2,
                      float eps, const OptimWrite& w, cudaStream_t stream) {
    dispatch(t, [&](auto* weight, const auto* grad) {
        const bool vec = aligned16(weight, grad, m, v) && w.element_base % 4 == 0;
        adamw_kernel<<<grid_for((t.numel() + VEC - 1) / VEC, THREADS), THREADS, 0, stream>>>(
            weight, grad, t.grad_scale, m, v, t.numel(), vec, float(b1), float(1.0 - b1), float(b2), float(1.0 - b2),
            inv_bc1, inv_sqrt_bc2, eps, w);
        cuda_check_kernel("adamw_kernel");
    });
}

void optim_lion_step(const OptimTensor& t, float* m, double b1, double b2, const OptimWrite& w, cudaStream_t stream) {
    dispatch(t, [&](auto* weight, const auto* grad) {
        const bool vec = aligned16(weight, grad, m) && w.element_base % 4 == 0;
        lion_kernel<<<grid_for((t.numel() + VEC - 1) / VEC, THREADS), THREADS, 0, stream>>>(
            weight, grad, t.grad_scale, m, t.numel(), vec, float(b1), float(1.0 - b1), float(b2), float(1.0 - b2), w);
        cuda_check_kernel("lion_kernel");
    });
}

}  // namespace skew::cuda
