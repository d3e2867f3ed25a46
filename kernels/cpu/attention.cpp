// CPU causal grouped-query attention (docs/design.md, "The paper's model": 32 query heads share 8 KV
// heads; query head h reads KV head h / (n_heads / n_kv_heads)), scale 1/sqrt(head_dim). Forward
// saves the log-sum-exp per query row; backward recomputes the probabilities from it. The score and
// value products are OpenBLAS sgemm calls on blocks of query rows (fp32; one task per head, so the
// results do not depend on the thread count); the softmax's exponentials are exp_nonpos_f32.
#include <cblas.h>
#include <climits>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

void check_shape(const char* op, const AttentionShape& s) {
    check_nonneg(op, s.batch);
    check_nonneg(op, s.seq_len);
    if (s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0)
        fail("{}: n_heads {}, n_kv_heads {} and head_dim {} must be positive", op, s.n_heads, s.n_kv_heads, s.head_dim);
    if (s.n_heads % s.n_kv_heads != 0)
        fail("{}: n_heads {} is not a multiple of n_kv_heads {}", op, s.n_heads, s.n_kv_heads);
    if (s.kv_len != 0 && s.kv_len < s.seq_len)
        fail("{}: kv_len {} is below seq_len {} (the queries are the last seq_len positions)", op, s.kv_len, s.seq_len);
}

void check_blas_dims(const char* op, int64_t seq_len, int64_t head_dim) {
    if (seq_len * std::max<int64_t>(seq_len, head_dim) > INT_MAX)
        fail("{}: seq_len {} exceeds the BLAS 32-bit index range", op, seq_len);
}

/// p[j] = exp(p[j] - mx) for j < n (each <= 0 up to rounding), sixteen lanes at a time; returns
/// their sum, added in sixteen lanes (lane l: j = l, l + 16, ...) then lane by lane, then the tail.
float softmax_exp_sum(float* p, int64_t n, float mx) {
    f32x16 acc = f32x16{};
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        f32x16 x, e;
        std::memcpy(&x, p + j, sizeof(x));
        x -= mx;
        exp_nonpos_lanes<f32x16, i32x16>(e, x);
        std::memcpy(p + j, &e, sizeof(e));
        acc += e;
    }
    float sum = 0.0f;
    for (int l = 0; l < 16; ++l) sum += acc[l];
    for (; j < n; ++j) sum += (p[j] = exp_nonpos_f32(p[j] - mx));
    return sum;
}

/// p[j] = exp(p[j] - shift) for j < n, sixteen lanes at a time.
void softmax_exp(float* p, int64_t n, float shift) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        f32x16 x, e;
        std::memcpy(&x, p + j, sizeof(x));
        x -= shift;
        exp_nonpos_lanes<f32x16, i32x16>(e, x);
        std::memcpy(p + j, &e, sizeof(e));
    }
    for (; j < n; ++j) p[j] = exp_nonpos_f32(p[j] - shift);
}

}  // namespace

namespace {

/// Query rows per block: the block's scores (QUERY_BLOCK x keys fp32) stay in cache.
constexpr int64_t QUERY_BLOCK = 64;

// Widen rows [t0, t0 + n) of head `head` (of `heads`) of batch b (each row head_dim) into dst (n, head_dim).
template <class T>
void widen_rows(float* dst, const T* src, int64_t b, int64_t head, int64_t heads, int64_t t0, int64_t n, int64_t Tn,
                int64_t D) {
    for (int64_t j = 0; j < n; ++j) {
        const T* r = src + ((b * Tn + t0 + j) * heads + head) * D;
        for (int64_t d = 0; d < D; ++d) dst[j * D + d] = load(r[d]);
    }
}

// Store src (n, head_dim) as rows [t0, t0 + n) of head `head` of batch b.
template <class T>
void store_rows(T* dst, const float* src, int64_t b, int64_t head, int64_t heads, int64_t t0, int64_t n, int64_t Tn,
                int64_t D) {
    for (int64_t j = 0; j < n; ++j) {
        T* r = dst + ((b * Tn + t0 + j) * heads + head) * D;
        for (int64_t d = 0; d < D; ++d) store(r + d, src[j * D + d]);
    }
}

// C (m x n) = alpha op(A) op(B) + beta C, row-major, single-threaded (inside an OpenMP task).
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace

// Forward, per (batch, query head) and block of QUERY_BLOCK query rows q0..: the block's scores
// S = scale · Q K^T over keys [0, off + q0 + rows) (one sgemm; off = kv_len - seq_len, the position
// of query row 0), per row the causal softmax (max, then exp_nonpos_f32 lane by lane, the sum in a
// fixed order; later keys get probability 0), lse, and O = P V (one sgemm).
template <class T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const AttentionShape& s) {
    check_shape("attention_forward", s);
    const int64_t B = s.batch, Tn = s.seq_len, Tk = s.keys(), H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    if (B == 0 || Tn == 0) return;
    check_blas_dims("attention_forward", Tk, D);
    const int64_t group = H / KV, off = Tk - Tn;
    const float scale = 1.0f / std::sqrt(float(D));
    const BlasSerialScope serial_blas;  // one single-threaded product per OpenMP task
#pragma omp parallel if (B * H * Tn * Tk * D > kParallelMinWork)
    {
        const int64_t QB = std::min(QUERY_BLOCK, Tn);
        std::vector<float> kf(static_cast<size_t>(Tk * D)), vf(static_cast<size_t>(Tk * D));
        std::vector<float> qf(static_cast<size_t>(QB * D)), of(static_cast<size_t>(QB * D));
        std::vector<float> sc(static_cast<size_t>(QB * Tk));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bh = 0; bh < B * H; ++bh) {
            const int64_t b = bh / H, h = bh % H, g = h / group;
            widen_rows(kf.data(), k, b, g, KV, 0, Tk, Tk, D);
            widen_rows(vf.data(), v, b, g, KV, 0, Tk, Tk, D);
            for (int64_t q0 = 0; q0 < Tn; q0 += QB) {
                const int64_t rows = std::min(QB, Tn - q0), keys = off + q0 + rows;
                widen_rows(qf.data(), q, b, h, H, q0, rows, Tn, D);
                gemm(false, true, rows, keys, D, scale, qf.data(), D, kf.data(), D, 0.0f, sc.data(), keys);
                for (int64_t i = 0; i < rows; ++i) {
                    float* p = sc.data() + i * keys;
                    const int64_t n = off + q0 + i + 1;  // keys 0..t
                    float mx = -INFINITY;
                    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, p[j]);
                    const float sum = softmax_exp_sum(p, n, mx);
                    const float inv = 1.0f / sum;
                    for (int64_t j = 0; j < n; ++j) p[j] *= inv;
                    std::fill(p + n, p + keys, 0.0f);
                    if (lse) lse[(b * H + h) * Tn + q0 + i] = mx + std::log(sum);
                }
                gemm(false, false, rows, D, keys, 1.0f, sc.data(), keys, vf.data(), D, 0.0f, of.data(), D);
                store_rows(out, of.data(), b, h, H, q0, rows, Tn, D);
            }
        }
    }
}

// Backward, per (batch, KV head), which owns dK and dV of that head and sums them over its query
// heads: per query head and block, P again from S and the saved lse, dP = dO V^T, the row sums
// D_i = Σ_j P_ij dP_ij (formed exactly instead of <dO, O>), dS = P ⊙ (dP - D) · scale, then
// dQ = dS K, dK += dS^T Q, dV += P^T dO (sgemm each).
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const AttentionShape& s) {
    check_shape("attention_backward", s);
    if (s.keys() != s.seq_len)
        fail("attention_backward: kv_len {} differs from seq_len {} (a KV-cache step has no backward)", s.kv_len,
             s.seq_len);
    (void)out;
    const int64_t B = s.batch, Tn = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    if (B == 0 || Tn == 0) return;
    check_blas_dims("attention_backward", Tn, D);
    const int64_t group = H / KV;
    const float scale = 1.0f / std::sqrt(float(D));
    const BlasSerialScope serial_blas;
#pragma omp parallel if (B * H * Tn * Tn * D > kParallelMinWork)
    {
        const int64_t QB = std::min(QUERY_BLOCK, Tn);
        std::vector<float> kf(static_cast<size_t>(Tn * D)), vf(static_cast<size_t>(Tn * D));
        std::vector<float> dkf(static_cast<size_t>(Tn * D)), dvf(static_cast<size_t>(Tn * D));
        std::vector<float> qf(static_cast<size_t>(QB * D)), gf(static_cast<size_t>(QB * D)),
            dqf(static_cast<size_t>(QB * D));
        std::vector<float> pr(static_cast<size_t>(QB * Tn)), dp(static_cast<size_t>(QB * Tn));
#pragma omp for schedule(dynamic, 1)
        for (int64_t bg = 0; bg < B * KV; ++bg) {
            const int64_t b = bg / KV, g = bg % KV;
            widen_rows(kf.data(), k, b, g, KV, 0, Tn, Tn, D);
            widen_rows(vf.data(), v, b, g, KV, 0, Tn, Tn, D);
            std::fill(dkf.begin(), dkf.end(), 0.0f);
            std::fill(dvf.begin(), dvf.end(), 0.0f);
            for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                for (int64_t q0 = 0; q0 < Tn; q0 += QB) {
                    const int64_t rows = std::min(QB, Tn - q0), keys = q0 + rows;
                    widen_rows(qf.data(), q, b, h, H, q0, rows, Tn, D);
                    widen_rows(gf.data(), dout, b, h, H, q0, rows, Tn, D);
                    gemm(false, true, rows, keys, D, scale, qf.data(), D, kf.data(), D, 0.0f, pr.data(), keys);
                    gemm(false, true, rows, keys, D, 1.0f, gf.data(), D, vf.data(), D, 0.0f, dp.data(), keys);
                    for (int64_t i = 0; i < rows; ++i) {
                        float* p = pr.data() + i * keys;
                        float* ds = dp.data() + i * keys;
                        const int64_t n = q0 + i + 1;
                        softmax_exp(p, n, lse[(b * H + h) * Tn + q0 + i]);
                        float dsum = 0.0f;
                        for (int64_t j = 0; j < n; ++j) dsum += p[j] * ds[j];
                        for (int64_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - dsum) * scale;
                        std::fill(p + n, p + keys, 0.0f);
                        std::fill(ds + n, ds + keys, 0.0f);
                    }
                    gemm(false, false, rows, D, keys, 1.0f, dp.data(), keys, kf.data(), D, 0.0f, dqf.data(), D);
                    store_rows(dq, dqf.data(), b, h, H, q0, rows, Tn, D);
                    gemm(true, false, keys, D, rows, 1.0f, dp.data(), keys, qf.data(), D, 1.0f, dkf.data(), D);
                    gemm(true, false, keys, D, rows, 1.0f, pr.data(), keys, gf.data(), D, 1.0f, dvf.data(), D);
                }
            }
            store_rows(dk, dkf.data(), b, g, KV, 0, Tn, Tn, D);
            store_rows(dv, dvf.data(), b, g, KV, 0, Tn, Tn, D);
        }
    }
}

template void attention_forward<bf16>(bf16*, float*, const bf16*, const bf16*, const bf16*, const AttentionShape&);
template void attention_forward<float>(float*, float*, const float*, const float*, const float*, const AttentionShape&);
template void attention_backward<bf16>(bf16*, bf16*, bf16*, const bf16*, const bf16*, const bf16*, const bf16*,
                                       const bf16*, const float*, const AttentionShape&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, const float*, const AttentionShape&);

}  // namespace skew::cpu
