// CPU matrix products: bf16 or fp32 operands widened to fp32 in k-panels, multiplied by OpenBLAS
// cblas_sgemm with fp32 accumulation (docs/design.md: bf16 storage, fp32 accumulation). Every linear
// layer of the model (attention, SwiGLU, experts, router, tied LM head) and its backward runs here.
#include <cblas.h>
#include <omp.h>

// OpenBLAS's thread-count controls (declared here: the cblas.h in use may be another BLAS's).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

#include <climits>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/matmul_args.h"

namespace skew::cpu {

void check_nonneg(const char* what, int64_t v) {
    if (v < 0) fail("{}: negative size {}", what, v);
}

BlasSerialScope::BlasSerialScope() : saved_threads(omp_in_parallel() ? 1 : openblas_get_num_threads()) {
    if (saved_threads != 1) openblas_set_num_threads(1);
}

BlasSerialScope::~BlasSerialScope() {
    if (saved_threads != 1) openblas_set_num_threads(saved_threads);
}

namespace {

// Widen rows [r0, r1) x cols [c0, c1) of a row-major (rows, ld) bf16/fp32 matrix into dst (r1-r0, c1-c0).
void widen_block(float* dst, ConstTensorRef src, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0;
#pragma omp parallel for schedule(static) if ((r1 - r0) * w > kParallelMinWork)
    for (int64_t r = r0; r < r1; ++r) {
        float* d = dst + (r - r0) * w;
        if (src.type == ScalarType::BF16) {
            const bf16* s = static_cast<const bf16*>(src.data) + r * ld + c0;
            for (int64_t c = 0; c < w; ++c) d[c] = bf16_to_f32(s[c]);
        } else {
            const float* s = static_cast<const float*>(src.data) + r * ld + c0;
            std::copy(s, s + w, d);
        }
    }
}

// C (m x n, ldc) = alpha op(A) op(B) + beta C on OpenMP threads: C split into one slab of rows (or
// of columns, when n > m) per thread, each a single-threaded cblas_sgemm (BlasSerialScope), so
// OpenBLAS's own threads do not spin beside OpenMP's. Every element is one sgemm's dot product over
// the whole k, as in one call.
void sgemm_omp(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
    const BlasSerialScope serial_blas;
    const int threads = m * n * k >= (int64_t(1) << 20) ? omp_get_max_threads() : 1;
    const bool split_n = n > m;
    const int64_t extent = split_n ? n : m;
    const int64_t slab = std::max<int64_t>(16, (extent / threads + 15) / 16 * 16);
    const int64_t parts = (extent + slab - 1) / slab;
#pragma omp parallel for schedule(static) num_threads(threads) if (parts > 1)
    for (int64_t p = 0; p < parts; ++p) {
        const int64_t i0 = p * slab, w = std::min(slab, extent - i0);
        const float* ap = a;
        const float* bp = b;
        float* cp = c;
        int64_t mm = m, nn = n;
        if (split_n) {
            bp = tb ? b + i0 * ldb : b + i0;
            cp = c + i0;
            nn = w;
        } else {
            ap = ta ? a + i0 : a + i0 * lda;
            cp = c + i0 * ldc;
            mm = w;
        }
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(mm), int(nn),
                    int(k), alpha, ap, int(lda), bp, int(ldb), beta, cp, int(ldc));
    }
}

/// fp32 scratch for the widened operands and the accumulator of C: one buffer per role and calling
/// thread, grown when a product needs more and kept (not zeroed: every use overwrites what it
/// reads), so products allocate, fault in and clear no memory of their own each call.
enum ScratchRole { SCRATCH_A, SCRATCH_B, SCRATCH_C, SCRATCH_ROLES };
float* scratch(ScratchRole role, int64_t n) {
    struct Buffer {
        std::unique_ptr<float[]> data;
        int64_t size = 0;
    };
    thread_local Buffer buffers[SCRATCH_ROLES];
    Buffer& b = buffers[role];
    if (b.size < n) {
        b.data.reset(new float[size_t(n)]);
        b.size = n;
    }
    return b.data.get();
}

void check_blas_dim(int64_t v) {
    if (v > INT_MAX) fail("matmul: dimension {} exceeds the BLAS 32-bit index range", v);
}

}  // namespace

void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) {
    const int64_t m = s.m, n = s.n, k = s.k;
    matmul_check_args(c, a, b, s);
    if (m == 0 || n == 0) return;
    check_blas_dim(m);
    check_blas_dim(n);
    check_blas_dim(k);

    // fp32 accumulator for C: C itself when fp32, else a widened copy rounded back at the end.
    float* cf = nullptr;
    if (c.type == ScalarType::F32) {
        cf = static_cast<float*>(c.data);
    } else {
        cf = scratch(SCRATCH_C, m * n);  // k > 0 with beta 0 overwrites it; k == 0 below
        if (s.beta != 0.0f) widen_block(cf, c, n, 0, m, 0, n);
    }
    if (k == 0) {  // empty reduction: C = beta * C
        for (int64_t i = 0; i < m * n; ++i) cf[i] = s.beta == 0.0f ? 0.0f : s.beta * cf[i];
    }

    // k-panels: bound the widened copies of bf16 operands to about 16M floats.
    const bool widen_a = a.type == ScalarType::BF16, widen_b = b.type == ScalarType::BF16;
    int64_t kb = k;
    if ((widen_a || widen_b) && (m + n) * k > (int64_t(1) << 24))
        kb = std::max<int64_t>(64, (int64_t(1) << 24) / (m + n));
    for (int64_t k0 = 0; k0 < k; k0 += kb) {
        const int64_t k1 = std::min(k, k0 + kb), kw = k1 - k0;
        // op(A)[:, k0:k1]: A stored (m, k) -> columns k0..k1; stored (k, m) -> rows k0..k1.
        const float* ap;
        int64_t lda;
        if (!widen_a) {
            const float* a32 = static_cast<const float*>(a.data);
            ap = s.trans_a ? a32 + k0 * m : a32 + k0;
            lda = s.trans_a ? m : k;
        } else if (s.trans_a) {
            float* a_tmp = scratch(SCRATCH_A, kw * m);
            widen_block(a_tmp, a, m, k0, k1, 0, m);
            ap = a_tmp;
            lda = m;
        } else {
            float* a_tmp = scratch(SCRATCH_A, m * kw);
            widen_block(a_tmp, a, k, 0, m, k0, k1);
            ap = a_tmp;
            lda = kw;
        }
        // op(B)[k0:k1, :]: B stored (k, n) -> rows k0..k1; stored (n, k) -> columns k0..k1.
        const float* bp;
        int64_t ldb;
        if (!widen_b) {
            const float* b32 = static_cast<const float*>(b.data);
            bp = s.trans_b ? b32 + k0 : b32 + k0 * n;
            ldb = s.trans_b ? k : n;
        } else if (s.trans_b) {
            float* b_tmp = scratch(SCRATCH_B, n * kw);
            widen_block(b_tmp, b, k, 0, n, k0, k1);
            bp = b_tmp;
            ldb = kw;
        } else {
            float* b_tmp = scratch(SCRATCH_B, kw * n);
            widen_block(b_tmp, b, n, k0, k1, 0, n);
            bp = b_tmp;
            ldb = n;
        }
        const float beta = k0 == 0 ? s.beta : 1.0f;
        sgemm_omp(s.trans_a, s.trans_b, m, n, kw, s.alpha, ap, lda, bp, ldb, beta, cf, n);
    }

    if (c.type == ScalarType::BF16) convert(c, ConstTensorRef(cf), m * n);
}

}  // namespace skew::cpu
