// GaLore on the CPU (docs/optimizers.md §6). `galore` (reference, jiaweizzhao/GaLore): one-sided
// projection from an exact SVD refreshed every update_proj_gap steps, Adam in the subspace with bias
// correction, scale galore_scale. `galore-paper` (the paper's trainer): two-sided r x r projection from
// a randomized SVD (Philox Gaussian test matrix, 2 power iterations) computed once, no bias correction.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/philox.h"
#include "optim/optim_internal.h"

extern "C" void sgesvd_(const char* jobu, const char* jobvt, const int* m, const int* n, float* a, const int* lda,
                        float* s, float* u, const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork,
                        int* info);

namespace skew::optim_detail {

/// C (m x n) = op(A) op(B), row-major, fp32.
static void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, const float* B, float* C) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
                1.0f, A, ta ? int(m) : int(k), B, tb ? int(k) : int(n), 0.0f, C, int(n));
}

/// Thin SVD of row-major G (m x n): U (m x k) row-major and Vh (k x n) row-major, k = min(m, n),
/// singular values descending (LAPACK sgesvd on G^T viewed column-major).
static void svd_thin(const float* G, int64_t m, int64_t n, std::vector<float>& U, std::vector<float>& Vh,
                     const std::string& name) {
    const int64_t k = std::min(m, n);
    std::vector<float> a(G, G + m * n), s(static_cast<size_t>(k)), uc(static_cast<size_t>(n * k)),
        vt(static_cast<size_t>(k * m));
    int M = int(n), N = int(m), lda = int(n), ldu = int(n), ldvt = int(k), lwork = -1, info = 0;
    float wq = 0;
    sgesvd_("S", "S", &M, &N, a.data(), &lda, s.data(), uc.data(), &ldu, vt.data(), &ldvt, &wq, &lwork, &info);
    lwork = std::max(1, int(wq));
    std::vector<float> work(static_cast<size_t>(lwork));
    sgesvd_("S", "S", &M, &N, a.data(), &lda, s.data(), uc.data(), &ldu, vt.data(), &ldvt, work.data(), &lwork, &info);
    if (info != 0) fail("galore: SVD of '{}' failed (LAPACK info {})", name, info);
    // G^T = Uc S VTc  =>  G = VTc^T S Uc^T: U_G[i][j] = vt[j + i*k], Vh_G[j][c] = uc[c + j*n].
    U.resize(size_t(m * k));
    Vh.resize(size_t(k * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j) U[size_t(i * k + j)] = vt[size_t(j + i * k)];
    for (int64_t j = 0; j < k; ++j)
        for (int64_t c = 0; c < n; ++c) Vh[size_t(j * n + c)] = uc[size_t(c + j * n)];
}

/// Orthonormalize the columns of row-major X (m x r) in place: Gram-Schmidt twice (each pass
/// removes from column j its projections on columns 0..j-1 with two BLAS gemv, then normalizes it
/// with a double-precision norm). BLAS keeps it fast at the paper's shapes (m up to 50,304, r 128).
static void orthonormalize_columns(std::vector<float>& X, int64_t m, int64_t r) {
    std::vector<float> d(static_cast<size_t>(std::max<int64_t>(r, 1)));
    const int im = int(m), ir = int(r);
    for (int pass = 0; pass < 2; ++pass)
        for (int64_t j = 0; j < r; ++j) {
            float* xj = X.data() + j;
            if (j > 0) {
                cblas_sgemv(CblasRowMajor, CblasTrans, im, int(j), 1.0f, X.data(), ir, xj, ir, 0.0f, d.data(), 1);
                cblas_sgemv(CblasRowMajor, CblasNoTrans, im, int(j), -1.0f, X.data(), ir, d.data(), 1, 1.0f, xj, ir);
            }
            double nn = 0;
            for (int64_t i = 0; i < m; ++i) nn += double(xj[i * r]) * xj[i * r];
            const float inv = nn > 0 ? float(1.0 / std::sqrt(nn)) : 0.0f;
            for (int64_t i = 0; i < m; ++i) xj[i * r] *= inv;
        }
}

/// Randomized rank-r SVD of G (m x n) as torch.svd_lowrank(G, q=r, niter=2): Omega (n x r) Gaussian
/// from Philox (stream GALORE, keyed by step, tensor, element), Q = orth(G Omega), two power
/// iterations, B = Q^T G, U = Q U_B; outputs U (m x r) and Vt (r x n), row-major.
static void svd_randomized(const float* G, int64_t m, int64_t n, int64_t r, uint64_t seed, uint32_t step,
                           uint32_t tensor, int64_t elem_base, std::vector<float>& U, std::vector<float>& Vt,
                           const std::string& name) {
    std::vector<float> omega(static_cast<size_t>(n * r)), Q(static_cast<size_t>(m * r)), Z(static_cast<size_t>(n * r)),
        B(static_cast<size_t>(r * n));
    for (int64_t i = 0; i < n * r; ++i)
        omega[size_t(i)] = philox_normal(PhiloxKey{seed, PHILOX_STREAM_GALORE}, step, tensor, uint64_t(elem_base + i));
    gemm(false, false, m, r, n, G, omega.data(), Q.data());
    orthonormalize_columns(Q, m, r);
    for (int it = 0; it < 2; ++it) {
        gemm(true, false, n, r, m, G, Q.data(), Z.data());  // Z = G^T Q
        orthonormalize_columns(Z, n, r);
        gemm(false, false, m, r, n, G, Z.data(), Q.data());  // Q = G Z
        orthonormalize_columns(Q, m, r);
    }
    gemm(true, false, r, n, m, Q.data(), G, B.data());  // B = Q^T G (r x n)
    std::vector<float> Ub, Vh;
    svd_thin(B.data(), r, n, Ub, Vh, name);  // Ub (r x r), Vh (r x n)
    U.resize(size_t(m * r));
    gemm(false, false, m, r, r, Q.data(), Ub.data(), U.data());
    Vt.assign(Vh.begin(), Vh.end());
}

/// Sign convention for singular vectors (both forms, and the golden script): flip each vector so
/// that its largest-magnitude entry is positive. Vector j of row-major X (len x count) is element
/// j*stride_vec + i*stride_elem for i < len. Returns +1/-1 per vector.
static std::vector<float> canonical_signs(const float* X, int64_t len, int64_t count, int64_t stride_elem,
                                          int64_t stride_vec) {
    std::vector<float> sg(static_cast<size_t>(count), 1.0f);
    for (int64_t j = 0; j < count; ++j) {
        float best = 0.0f, val = 0.0f;
        for (int64_t i = 0; i < len; ++i) {
            float x = X[j * stride_vec + i * stride_elem];
            if (std::fabs(x) > best) best = std::fabs(x), val = x;
        }
        if (val < 0) sg[size_t(j)] = -1.0f;
    }
    return sg;
}

static bool all_zero(const float* p, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
        if (p[i] != 0.0f) return false;
    return true;
}

bool galore_refresh_due(const OptimizerConfig& opt, const ParamPolicy& pol, int64_t t, bool projector_zero) {
    if (pol.kind == OptimizerType::GALORE_PAPER) return projector_zero;  // computed once, never refreshed
    return (t - 1) % std::max<int64_t>(1, opt.update_proj_gap) == 0 || projector_zero;
}

void galore_projector(const OptimizerConfig& opt, const ParamPolicy& pol, const ParamInfo& p, const OptimStep& step,
                      int64_t e, const float* G, float* Pe, float* Qe) {
    (void)opt;
    const MatrixShape ms = matrix_shape(p);
    const int64_t m = ms.rows, n = ms.cols, r = pol.galore_rank;
    if (pol.kind == OptimizerType::GALORE_PAPER) {
        std::vector<float> U, Vt;
        svd_randomized(G, m, n, r, step.seed, uint32_t(step.t), p.index, e * n * r, U, Vt, p.name);
        // U columns canonical; the matching rows of V^T flip with them (G = U S V^T).
        std::vector<float> sg = canonical_signs(U.data(), m, r, r, 1);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < r; ++j) Pe[i * r + j] = U[size_t(i * r + j)] * sg[size_t(j)];
        for (int64_t j = 0; j < r; ++j)
            for (int64_t c = 0; c < n; ++c) Qe[j * n + c] = Vt[size_t(j * n + c)] * sg[size_t(j)];
        return;
    }
    std::vector<float> U, Vh;
    svd_thin(G, m, n, U, Vh, p.name);
    const int64_t k = std::min(m, n);
    if (m >= n) {  // Vh[:r, :] (r x n), rows canonical
        std::vector<float> sg = canonical_signs(Vh.data(), n, r, 1, n);
        for (int64_t j = 0; j < r; ++j)
            for (int64_t c = 0; c < n; ++c) Pe[j * n + c] = Vh[size_t(j * n + c)] * sg[size_t(j)];
    } else {  // U[:, :r] (m x r), columns canonical
        std::vector<float> sg = canonical_signs(U.data(), m, r, k, 1);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < r; ++j) Pe[i * r + j] = U[size_t(i * k + j)] * sg[size_t(j)];
    }
}

void galore_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    const bool paper = pol.kind == OptimizerType::GALORE_PAPER;
    if (!pol.galore_project) {
        // Off-matrix parameters: plain Adam (reference: AdamW with bias correction; paper: uncorrected).
        adam_elementwise(opt, s, need_state(s, StateKind::ADAM_M), need_state(s, StateKind::ADAM_V), opt.beta1,
                         opt.beta2, opt.eps, !paper, step.lr, pol.weight_decay, step);
        return;
    }
    require_whole(s, "galore");
    const ParamInfo& p = *s.info;
    MatrixShape ms = matrix_shape(p);
    const int64_t m = ms.rows, n = ms.cols, r = pol.galore_rank;
    float* P = need_state(s, StateKind::GALORE_P);
    float* Q = paper ? need_state(s, StateKind::GALORE_Q) : nullptr;
    float* M = need_state(s, StateKind::GALORE_M);
    float* V = need_state(s, StateKind::GALORE_V);
    const double t = double(step.t);
    const double bc1 = 1.0 - std::pow(opt.beta1, t), bc2 = 1.0 - std::pow(opt.beta2, t);
    const double alpha = paper ? step.lr : step.lr * std::sqrt(bc2) / bc1 * opt.galore_scale;
    const WriteBack wb = make_write_back(opt, s, step, alpha, step.lr, pol.weight_decay);
    const float b1 = float(opt.beta1), omb1 = float(1.0 - opt.beta1);
    const float b2 = float(opt.beta2), omb2 = float(1.0 - opt.beta2), eps = float(opt.eps);
    const bool tall = m >= n;
    const int64_t p_numel = paper ? m * r : (tall ? r * n : m * r);
    const int64_t proj_numel = paper ? r * r : (tall ? m * r : r * n);
    std::vector<float> G(static_cast<size_t>(m * n)), Gt(static_cast<size_t>(proj_numel)),
        N(static_cast<size_t>(proj_numel)), Nf(static_cast<size_t>(m * n)), tmp;
    // the slot's first matrix in the whole bank (a view over some experts: ZeRO-1, deferred experts):
    // the paper form's test matrices are keyed by the bank's matrix index, as in the whole-bank step
    const int64_t matrix_base = wb.element_base / (m * n);
    for (int64_t e = 0; e < ms.count; ++e) {
        const int64_t base = e * m * n;
        for (int64_t i = 0; i < m * n; ++i) G[size_t(i)] = grad_at(s, base + i);
        float* Pe = P + e * p_numel;
        float* Me = M + e * proj_numel;
        float* Ve = V + e * proj_numel;
        if (paper) {
            float* Qe = Q + e * r * n;
            if (galore_refresh_due(opt, pol, step.t, all_zero(Pe, p_numel)))
                galore_projector(opt, pol, p, step, e + matrix_base, G.data(), Pe, Qe);
            tmp.resize(size_t(m * r));
            gemm(false, true, m, r, n, G.data(), Qe, tmp.data());   // G V (m x r)
            gemm(true, false, r, r, m, Pe, tmp.data(), Gt.data());  // U^T G V (r x r)
            for (int64_t i = 0; i < r * r; ++i)
                N[size_t(i)] = galore_adam_element(Gt[size_t(i)], Me[i], Ve[i], b1, omb1, b2, omb2, eps);
            gemm(false, false, m, r, r, Pe, N.data(), tmp.data());   // U N (m x r)
            gemm(false, false, m, n, r, tmp.data(), Qe, Nf.data());  // U N V^T (m x n)
        } else {
            if (galore_refresh_due(opt, pol, step.t, all_zero(Pe, p_numel)))
                galore_projector(opt, pol, p, step, e + matrix_base, G.data(), Pe, nullptr);
            if (tall) gemm(false, true, m, r, n, G.data(), Pe, Gt.data());  // G P^T (m x r)
            else gemm(true, false, r, n, m, Pe, G.data(), Gt.data());       // P^T G (r x n)
            for (int64_t i = 0; i < proj_numel; ++i)
                N[size_t(i)] = galore_adam_element(Gt[size_t(i)], Me[i], Ve[i], b1, omb1, b2, omb2, eps);
            if (tall) gemm(false, false, m, n, r, N.data(), Pe, Nf.data());  // N P
            else gemm(false, false, m, n, r, Pe, N.data(), Nf.data());       // P N
        }
        for_each_write(s, wb, base, base + m * n, [&](int64_t j) { return Nf[size_t(j - base)]; });
    }
}

}  // namespace skew::optim_detail
