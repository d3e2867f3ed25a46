// Muon on the GPU (kernels/cuda/muon.h): three memory-bound kernels (momentum + Frobenius partials,
// normalize to bf16, write-back) with 16-byte accesses, and the Newton-Schulz iterations as bf16
// cuBLASLt products with fp32 accumulation, batched over a chunk of matrices (strided batches; the
// second and third product write D apart from C, so c1 A and c0 X need no copy). Deterministic:
// fixed partitions and reduction trees, no atomics; cuBLASLt's chosen algorithm is fixed per shape.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublaslt_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/muon.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int THREADS = 256;
constexpr int NORM_BLOCKS = cuda_ws::MUON_NORM_BLOCKS;
constexpr float NS_C0 = 3.4445f, NS_C1 = -4.7750f, NS_C2 = 2.0315f;

// ---- element access in groups of 8 (one or two 16-byte accesses)

struct F8 {
    float v[8];
};

__device__ __forceinline__ F8 load8f(const float* p) {
    F8 r;
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    r.v[0] = a.x, r.v[1] = a.y, r.v[2] = a.z, r.v[3] = a.w, r.v[4] = b.x, r.v[5] = b.y, r.v[6] = b.z, r.v[7] = b.w;
    return r;
}
__device__ __forceinline__ F8 load8f(const bf16* p) {
    const Bf16x8 h = load8(p);
    F8 r;
#pragma unroll
    for (int j = 0; j < 8; ++j) r.v[j] = bf16_to_f32(h.v[j]);
    return r;
}
__device__ __forceinline__ void store8f(float* p, const F8& r) {
    reinterpret_cast<float4*>(p)[0] = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(r.v[4], r.v[5], r.v[6], r.v[7]);
}

/// U0 from the updated momentum b (and g): what muon_momentum_element returned, bit for bit.
__device__ __forceinline__ float muon_u0(float g, float b, float mu, bool ema, bool nesterov) {
    if (!nesterov) return b;
    return ema ? rn_add(g, rn_mul(mu, rn_sub(b, g))) : rn_add(g, rn_mul(mu, b));
}

/// [lo, hi) of block `blk` in a matrix of n elements split into NORM_BLOCKS slices of a multiple of 8.
__device__ __forceinline__ void norm_slice(int64_t n, int blk, int64_t& lo, int64_t& hi) {
    const int64_t per = ((n + NORM_BLOCKS - 1) / NORM_BLOCKS + 7) / 8 * 8;
    lo = int64_t(blk) * per < n ? int64_t(blk) * per : n;
    hi = lo + per < n ? lo + per : n;
}

/// Pass 1, block (slice, matrix): B <- momentum(B, G) over the slice; partial[matrix][slice] = sum U0^2.
template <bool VEC, class G>
__global__ void __launch_bounds__(THREADS)
    muon_momentum_kernel(const G* __restrict__ grad, float* __restrict__ B, int64_t n, float gs, float mu, bool ema,
                         bool nesterov, double* __restrict__ partial) {
    __shared__ double smem[32];
    const int64_t e = blockIdx.y;
    int64_t lo, hi;
    norm_slice(n, blockIdx.x, lo, hi);
    const G* g = grad + e * n;
    float* b = B + e * n;
    double acc = 0;
    if (VEC) {
        for (int64_t i = lo + 8 * int64_t(threadIdx.x); i < hi; i += 8 * THREADS) {
            const F8 gv = load8f(g + i);
            F8 bv = load8f(b + i);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float u = muon_momentum_element(rn_mul(gv.v[j], gs), bv.v[j], mu, ema, nesterov);
                acc += double(u) * double(u);
            }
            store8f(b + i, bv);
        }
    } else {
        for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
            float bi = b[i];
            const float u = muon_momentum_element(rn_mul(ld(g[i]), gs), bi, mu, ema, nesterov);
            b[i] = bi;
            acc += double(u) * double(u);
        }
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) partial[e * NORM_BLOCKS + blockIdx.x] = acc;
}

/// Pass 2, block (slice, matrix): X = bf16(U0 * s), s = 1 / (float(sqrt(sum of the matrix's
/// partials, in slice order)) + 1e-7), as the CPU's muon_orthogonalize. X: stride elements per matrix.
template <bool VEC, class G>
__global__ void __launch_bounds__(THREADS)
    muon_normalize_kernel(const G* __restrict__ grad, const float* __restrict__ B, int64_t n, int64_t stride, float gs,
                          float mu, bool ema, bool nesterov, const double* __restrict__ partial, bf16* __restrict__ X) {
    __shared__ float s_scale;
    const int64_t e = blockIdx.y;
    if (threadIdx.x == 0) {
        double ss = 0;
        for (int k = 0; k < NORM_BLOCKS; ++k) ss += partial[e * NORM_BLOCKS + k];
        s_scale = 1.0f / (float(sqrt(ss)) + 1e-7f);
    }
    __syncthreads();
    const float s = s_scale;
    int64_t lo, hi;
    norm_slice(n, blockIdx.x, lo, hi);
    const G* g = grad + e * n;
    const float* b = B + e * n;
    bf16* x = X + e * stride;
    if (VEC) {
        for (int64_t i = lo + 8 * int64_t(threadIdx.x); i < hi; i += 8 * THREADS) {
            const F8 bv = load8f(b + i);
            F8 gv{};
            if (nesterov) gv = load8f(g + i);
            Bf16x8 o;
#pragma unroll
            for (int j = 0; j < 8; ++j)
                o.v[j] = f32_to_bf16(rn_mul(muon_u0(rn_mul(gv.v[j], gs), bv.v[j], mu, ema, nesterov), s));
            store8(x + i, o);
        }
    } else {
        for (int64_t i = lo + threadIdx.x; i < hi; i += THREADS) {
            const float gi = nesterov ? rn_mul(ld(g[i]), gs) : 0.0f;
            x[i] = f32_to_bf16(rn_mul(muon_u0(gi, b[i], mu, ema, nesterov), s));
        }
    }
}

/// Pass 3 over `count` matrices starting at tensor matrix e0: W <- round(W*keep - lr*scale*O),
/// O = X (bf16, stride per matrix), noise keyed by the tensor's element index. VEC: 8 elements per
/// thread step (two Philox blocks), n % 8 == 0.
template <bool VEC>
__global__ void __launch_bounds__(THREADS)
    muon_write_kernel(bf16* __restrict__ weight, const bf16* __restrict__ X, int64_t e0, int64_t count, int64_t n,
                      int64_t stride, float scale, OptimWrite wb) {
    if (VEC) {
        const int64_t groups = count * (n / 8), per = n / 8;
        for (int64_t q = thread_index(); q < groups; q += grid_stride()) {
            const int64_t e = q / per, k = (q - e * per) * 8;
            const int64_t el =
                (e0 + e) * n + k;  // tensor element, a multiple of 8 (element_base: of 4, the host checks)
            const Bf16x8 xo = load8(X + e * stride + k);
            Bf16x8 w = load8(weight + el);
            uint32_t rw[8];
            optim_write_words8(wb, uint64_t(el), rw);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float u = rn_mul(bf16_to_f32(xo.v[j]), scale);
                w.v[j] = optim_write_bf16(wb, bf16_to_f32(w.v[j]), u, rw[j]);
            }
            store8(weight + el, w);
        }
    } else {
        const int64_t total = count * n;
        for (int64_t q = thread_index(); q < total; q += grid_stride()) {
            const int64_t e = q / n, k = q - e * n, el = (e0 + e) * n + k;
            const float u = rn_mul(bf16_to_f32(X[e * stride + k]), scale);
            weight[el] = optim_write_bf16(wb, bf16_to_f32(weight[el]), u, optim_write_word(wb, uint64_t(el)));
        }
    }
}

/// fp32 weights: written exactly (no rounding), as the CPU's store_update.
__global__ void __launch_bounds__(THREADS)
    muon_write_f32_kernel(float* __restrict__ weight, const bf16* __restrict__ X, int64_t e0, int64_t count, int64_t n,
                          int64_t stride, float scale, OptimWrite wb) {
    const int64_t total = count * n;
    for (int64_t q = thread_index(); q < total; q += grid_stride()) {
        const int64_t e = q / n, k = q - e * n, el = (e0 + e) * n + k;
        weight[el] = optim_decayed_target(weight[el], wb.keep, wb.lr, rn_mul(bf16_to_f32(X[e * stride + k]), scale));
    }
}

// ---- cuBLASLt: strided-batched bf16 products, D = alpha op(A) op(B) + beta C (column-major)

struct LtKey {
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    bool ta, tb, has_c;
    auto tie() const { return std::tie(m, n, k, lda, ldb, ldc, sa, sb, sc, batch, ta, tb, has_c); }
    bool operator<(const LtKey& o) const { return tie() < o.tie(); }
};

/// The process's cuBLASLt handle and per-shape plans (descriptors and the heuristic's first algorithm
/// for a MUON_LT_WORKSPACE_BYTES workspace). Kept for the process's lifetime.
struct LtState {
    std::mutex mu;
    cublasLtHandle_t handle = nullptr;
    std::map<LtKey, LtPlan> plans;
};

LtState& lt_state() {
    static LtState* s = new LtState();  // never destroyed: plans may be used until exit
    return *s;
}

/// A column-major bf16 layout of `batch` matrices `stride` elements apart.
LtMatrixLayout lt_layout(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
    LtMatrixLayout l = lt_matrix_layout(CUDA_R_16BF, rows, cols, ld);
    const int32_t b = int32_t(batch);
    cublas_check(cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)));
    cublas_check(cublasLtMatrixLayoutSetAttribute(l.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                  sizeof(stride)));
    return l;
}

/// Largest power of two (<= 256) dividing a batch stride of `stride` bf16 elements, in bytes.
uint32_t batch_alignment(int64_t stride) {
    uint32_t al = 256;
    while (al > 2 && (stride * 2) % al != 0) al >>= 1;
    return al;
}

const LtPlan& lt_plan(LtState& s, const LtKey& key) {
    auto it = s.plans.find(key);
    if (it != s.plans.end()) return it->second;
    if (!s.handle) cublas_check(cublasLtCreate(&s.handle));
    LtPlan p;
    p.desc = lt_matmul_desc(key.ta, key.tb);
    // Stored shapes: op(A) is m x k, so A is (ta ? k x m : m x k); B likewise k x n.
    p.a = key.ta ? lt_layout(key.k, key.m, key.lda, key.sa, key.batch)
                 : lt_layout(key.m, key.k, key.lda, key.sa, key.batch);
    p.b = key.tb ? lt_layout(key.n, key.k, key.ldb, key.sb, key.batch)
                 : lt_layout(key.k, key.n, key.ldb, key.sb, key.batch);
    p.c = lt_layout(key.m, key.n, key.ldc, key.sc, key.batch);
    // Every matrix of a batch starts at base (256-byte aligned) + i * stride * 2 bytes: tell the
    // heuristic the alignment that holds for all of them (the default assumes 256 bytes).
    const uint32_t al_c = batch_alignment(key.sc);
    const LtAlignment al{batch_alignment(key.sa), batch_alignment(key.sb), al_c, al_c};
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (!lt_choose_algo(s.handle, p, uint64_t(cuda_ws::MUON_LT_WORKSPACE_BYTES), al, st))
        throw_op_error("muon_step", "cuBLASLt has no algorithm for a batched bf16 Newton-Schulz product");
    return s.plans.emplace(key, std::move(p)).first->second;
}

/// D = alpha op(A) op(B) + beta C over `batch` matrices (column-major bf16, fp32 accumulation and
/// scale); C == nullptr means beta = 0. C and D share one layout.
void lt_gemm(const LtKey& key, float alpha, const bf16* A, const bf16* B, float beta, const bf16* C, bf16* D,
             void* workspace, cudaStream_t stream) {
    LtState& s = lt_state();
    std::lock_guard<std::mutex> lock(s.mu);
    const LtPlan& p = lt_plan(s, key);
    const float b = C ? beta : 0.0f;
    cublas_check(cublasLtMatmul(s.handle, p.desc.get(), &alpha, A, p.a.get(), B, p.b.get(), &b, C ? C : D, p.c.get(), D,
                                p.c.get(), &p.algo, workspace, size_t(cuda_ws::MUON_LT_WORKSPACE_BYTES), stream));
}

template <class F>
void dispatch_grad(const OptimTensor& t, F&& f) {
    if (t.grad_f32) f(static_cast<const float*>(t.grad));
    else f(static_cast<const bf16*>(t.grad));
}

}  // namespace

int64_t muon_scratch_bytes(int64_t n_mat, int64_t rows, int64_t cols) {
    return cuda_ws::muon_scratch_bytes(n_mat, rows, cols);
}

void muon_step(const OptimTensor& t, float* B, const MuonArgs& args, const OptimWrite& w, void* scratch,
               int64_t scratch_bytes, cudaStream_t stream) {
    const int64_t rows = t.rows, cols = t.cols, n = rows * cols, E = t.n_mat;
    if (E <= 0 || n <= 0) return;
    if (rows > 2147483647 || cols > 2147483647) throw_op_error("muon_step", "a matrix dimension beyond 2^31");
    if (scratch_bytes < cuda_ws::muon_scratch_bytes(E, rows, cols)) throw_op_error("muon_step", "too little scratch");
    const bool tall = rows > cols;
    const int64_t a = tall ? cols : rows, b = tall ? rows : cols;
    int64_t chunk = cuda_ws::muon_chunk_matrices(E, rows, cols);
    if (args.max_chunk > 0) chunk = std::min(chunk, args.max_chunk);
    if (chunk > 65535) chunk = 65535;  // grid y
    const int64_t sx = cuda_ws::muon_batch_stride(n), sa = cuda_ws::muon_batch_stride(a * a);
    const int64_t full_chunk = cuda_ws::muon_chunk_matrices(E, rows, cols);
    // Scratch layout (cuda_ws::muon_scratch_bytes): workspace | X | X' | A | Bm | partials.
    char* s = static_cast<char*>(scratch);
    void* workspace = s;
    s += cuda_ws::MUON_LT_WORKSPACE_BYTES;
    bf16* X = reinterpret_cast<bf16*>(s);
    s += cuda_ws::align256(2 * full_chunk * sx);
    bf16* Xn = reinterpret_cast<bf16*>(s);
    s += cuda_ws::align256(2 * full_chunk * sx);
    bf16* A = reinterpret_cast<bf16*>(s);
    s += cuda_ws::align256(2 * full_chunk * sa);
    bf16* Bm = reinterpret_cast<bf16*>(s);
    s += cuda_ws::align256(2 * full_chunk * sa);
    double* partial = reinterpret_cast<double*>(s);

    // Column-major view: the row-major rows x cols matrix M is stored as S = M^T (cols x rows, ld cols).
    // Wide (rows <= cols): Y = S (b x a) = X^T; A = Y^T Y; Bm = c2 A A + c1 A; Y' = Y Bm + c0 Y.
    // Tall (rows > cols): Y = S (a x b) = X;  A = Y Y^T; Bm likewise;       Y' = Bm Y + c0 Y.
    auto products = [&](int64_t batch) {
        const LtKey k_a = tall ? LtKey{a, a, b, a, a, a, sx, sx, sa, batch, false, true, false}
                               : LtKey{a, a, b, b, b, a, sx, sx, sa, batch, true, false, false};
        const LtKey k_b{a, a, a, a, a, a, sa, sa, sa, batch, false, false, true};
        const LtKey k_x = tall ? LtKey{a, b, a, a, a, a, sa, sx, sx, batch, false, false, true}
                               : LtKey{b, a, a, b, a, b, sx, sa, sx, batch, false, false, true};
        for (int64_t k = 0; k < args.ns_steps; ++k) {
            lt_gemm(k_a, 1.0f, X, X, 0.0f, nullptr, A, workspace, stream);
            lt_gemm(k_b, NS_C2, A, A, NS_C1, A, Bm, workspace, stream);
            if (tall) lt_gemm(k_x, 1.0f, Bm, X, NS_C0, X, Xn, workspace, stream);
            else lt_gemm(k_x, 1.0f, X, Bm, NS_C0, X, Xn, workspace, stream);
            std::swap(X, Xn);
        }
    };

    const bool vec_grad =
        n % 8 == 0 && aligned16(B) &&
        (t.grad_f32 ? aligned16(static_cast<const float*>(t.grad)) : aligned16(static_cast<const bf16*>(t.grad)));
    dispatch_grad(t, [&](const auto* grad) {
        for (int64_t e0 = 0; e0 < E; e0 += chunk) {
            const int64_t c = std::min(chunk, E - e0);
            const dim3 grid(NORM_BLOCKS, unsigned(c));
            const auto* g = grad + e0 * n;
            float* bm = B + e0 * n;
            auto passes = [&](auto vec) {
                constexpr bool V = decltype(vec)::value;
                muon_momentum_kernel<V><<<grid, THREADS, 0, stream>>>(g, bm, n, args.grad_scale, args.mu, args.ema,
                                                                      args.nesterov, partial);
                cuda_check_kernel("muon_momentum_kernel");
                muon_normalize_kernel<V><<<grid, THREADS, 0, stream>>>(g, bm, n, sx, args.grad_scale, args.mu, args.ema,
                                                                       args.nesterov, partial, X);
            };
            if (vec_grad) passes(std::true_type{});
            else passes(std::false_type{});
            cuda_check_kernel("muon_normalize_kernel");
            products(c);  // the result is in X (swapped an even or odd number of times: X names it)
            if (t.weight_f32) {
                muon_write_f32_kernel<<<grid_for(c * n, THREADS), THREADS, 0, stream>>>(
                    static_cast<float*>(t.weight), X, e0, c, n, sx, args.shape_scale, w);
            } else if (n % 8 == 0 && aligned16(static_cast<const bf16*>(t.weight)) && w.element_base % 4 == 0) {
                muon_write_kernel<true><<<grid_for(c * n / 8, THREADS), THREADS, 0, stream>>>(
                    static_cast<bf16*>(t.weight), X, e0, c, n, sx, args.shape_scale, w);
            } else {
                muon_write_kernel<false><<<grid_for(c * n, THREADS), THREADS, 0, stream>>>(
                    static_cast<bf16*>(t.weight), X, e0, c, n, sx, args.shape_scale, w);
            }
            cuda_check_kernel("muon_write_kernel");
        }
    });
}

}  // namespace skew::cuda
