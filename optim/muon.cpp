// Muon on the CPU (docs/optimizers.md §4; docs/design.md "Muon"): the paper's form by default (sum
// momentum 0.95, no Nesterov, 3 Newton-Schulz steps (3.4445, -4.7750, 2.0315) on
// buf/(||buf||_F + 1e-7), tall matrices transposed, no shape scale) with Keller Jordan's options;
// embeddings, positions, router and vectors go to an internal Adam at adam_lr * lr_t / lr.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "optim/optim_internal.h"

namespace skew::optim_detail {

/// Round every element of x (n) to bf16 and back (round to nearest even).
static void round_bf16(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

/// Newton-Schulz orthogonalization of X (a x b, a <= b, row-major fp32) in place: X <- X/(|X|_F+1e-7),
/// then `steps` times A = X X^T, B = c1 A + c2 A A, X = c0 X + B X. Scratch: A, B (a x a), Y (a x b).
/// bf16_operands: X, A, B and the new X are rounded to bf16 after each step (fp32 accumulation).
static void newton_schulz(float* X, int64_t a, int64_t b, int64_t steps, bool bf16_operands, std::vector<float>& A,
                          std::vector<float>& B, std::vector<float>& Y) {
    const float c0 = 3.4445f, c1 = -4.7750f, c2 = 2.0315f;
    double ss = 0;
    for (int64_t i = 0; i < a * b; ++i) ss += double(X[i]) * double(X[i]);
    const float scale = 1.0f / (float(std::sqrt(ss)) + 1e-7f);
    for (int64_t i = 0; i < a * b; ++i) X[i] *= scale;
    if (bf16_operands) round_bf16(X, a * b);
    A.resize(size_t(a * a));
    B.resize(size_t(a * a));
    Y.resize(size_t(a * b));
    const int ia = int(a), ib = int(b);
    for (int64_t k = 0; k < steps; ++k) {
        // A = X X^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ia, ia, ib, 1.0f, X, ib, X, ib, 0.0f, A.data(), ia);
        if (bf16_operands) round_bf16(A.data(), a * a);
        // B = c1 A + c2 A A
        for (int64_t i = 0; i < a * a; ++i) B[size_t(i)] = c1 * A[size_t(i)];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ia, ia, ia, c2, A.data(), ia, A.data(), ia, 1.0f,
                    B.data(), ia);
        if (bf16_operands) round_bf16(B.data(), a * a);
        // X = c0 X + B X
        for (int64_t i = 0; i < a * b; ++i) Y[size_t(i)] = c0 * X[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ia, ib, ia, 1.0f, B.data(), ia, X, ib, 1.0f, Y.data(),
                    ib);
        for (int64_t i = 0; i < a * b; ++i) X[i] = Y[size_t(i)];
        if (bf16_operands) round_bf16(X, a * b);
    }
}

void muon_orthogonalize(const float* U0, int64_t rows, int64_t cols, int64_t steps, bool bf16_operands, float* O) {
    const bool transpose = rows > cols;
    const int64_t a = transpose ? cols : rows, b = transpose ? rows : cols, n = rows * cols;
    std::vector<float> X(static_cast<size_t>(n)), A, B, Y;
    for (int64_t i = 0; i < n; ++i) {
        if (transpose) {
            const int64_t r = i / cols, c = i - r * cols;
            X[size_t(c * rows + r)] = U0[i];
        } else {
            X[size_t(i)] = U0[i];
        }
    }
    newton_schulz(X.data(), a, b, steps, bf16_operands, A, B, Y);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t r = i / cols, c = i - r * cols;
        O[i] = transpose ? X[size_t(c * rows + r)] : X[size_t(i)];
    }
}

void muon_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    if (pol.muon_adam) {
        // Internal Adam: lr = adam_lr * lr_t / lr (follows the schedule), no weight decay.
        double lr_adam = opt.lr > 0 ? opt.adam_lr * step.lr / opt.lr : 0.0;
        adam_elementwise(opt, s, need_state(s, StateKind::ADAM_M), need_state(s, StateKind::ADAM_V), opt.beta1,
                         opt.beta2, opt.eps, true, lr_adam, 0.0, step);
        return;
    }
    require_whole(s, "muon");
    const ParamInfo& p = *s.info;
    MatrixShape ms = matrix_shape(p);
    if (ms.rows > (int64_t(1) << 31) || ms.cols > (int64_t(1) << 31))
        fail("muon: tensor '{}' has a dimension beyond BLAS's int range", p.name);
    float* Bm = need_state(s, StateKind::MOMENTUM);
    const float mu = float(opt.muon_momentum);
    const float shape_scale =
        opt.shape_scale ? float(std::sqrt(std::fmax(1.0, double(ms.rows) / double(ms.cols)))) : 1.0f;
    const WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
    const int64_t n = ms.rows * ms.cols;
    std::vector<float> U0(static_cast<size_t>(n)), O(static_cast<size_t>(n));
    for (int64_t e = 0; e < ms.count; ++e) {
        const int64_t base = e * n;
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
        for (int64_t i = 0; i < n; ++i)
            U0[size_t(i)] =
                muon_momentum_element(grad_at(s, base + i), Bm[base + i], mu, opt.ema_momentum, opt.nesterov);
        muon_orthogonalize(U0.data(), ms.rows, ms.cols, opt.ns_steps, false, O.data());
        for_each_write(s, wb, base, base + n, [&](int64_t j) { return O[size_t(j - base)] * shape_scale; });
    }
}

}  // namespace skew::optim_detail
