// Muon on the CPU (docs/optimizers.md §4; docs/design.md "Muon"): the paper's form by default (sum
// momentum 0.95, no Nesterov, 3 Newton-Schulz steps (3.4445, -4.7750, 2.0315) on
// buf/(||buf||_F + 1e-7), tall matrices transposed, no shape scale) with Keller Jordan's options;
// embeddings, positions, router and vectors go to an internal Adam at adam_lr * lr_t / lr.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "optim/optim_internal.h"

namespace skew::optim_detail {

/// Newton-Schulz orthogonalization of X (a x b, a <= b, row-major fp32) in place: X <- X/(|X|_F+1e-7),
/// then `steps` times A = X X^T, B = c1 A + c2 A A, X = c0 X + B X. Scratch: A, B (a x a), Y (a x b).
static void newton_schulz(float* X, int64_t a, int64_t b, int64_t steps, std::vector<float>& A,
                          std::vector<float>& B, std::vector<float>& Y) {
    const float c0 = 3.4445f, c1 = -4.7750f, c2 = 2.0315f;
    double ss = 0;
    for (int64_t i = 0; i < a * b; ++i) ss += double(X[i]) * double(X[i]);
    const float scale = 1.0f / (float(std::sqrt(ss)) + 1e-7f);
    for (int64_t i = 0; i < a * b; ++i) X[i] *= scale;
    A.resize(size_t(a * a));
    B.resize(size_t(a * a));
    Y.resize(size_t(a * b));
    const int ia = int(a), ib = int(b);
    for (int64_t k = 0; k < steps; ++k) {
        // A = X X^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ia, ia, ib, 1.0f, X, ib, X, ib, 0.0f, A.data(), ia);
        // B = c1 A + c2 A A
        for (int64_t i = 0; i < a * a; ++i) B[size_t(i)] = c1 * A[size_t(i)];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ia, ia, ia, c2, A.data(), ia, A.data(), ia, 1.0f,
                    B.data(), ia);
        // X = c0 X + B X
        for (int64_t i = 0; i < a * b; ++i) Y[size_t(i)] = c0 * X[i];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ia, ib, ia, 1.0f, B.data(), ia, X, ib, 1.0f, Y.data(),
                    ib);
        for (int64_t i = 0; i < a * b; ++i) X[i] = Y[size_t(i)];
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
    const bool transpose = ms.rows > ms.cols;
    const int64_t a = transpose ? ms.cols : ms.rows, b = transpose ? ms.rows : ms.cols;
    const float shape_scale = opt.shape_scale ? float(std::sqrt(std::fmax(1.0, double(ms.rows) / double(ms.cols)))) : 1.0f;
    const WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
    std::vector<float> X(size_t(ms.rows * ms.cols)), A, B, Y;
    for (int64_t e = 0; e < ms.count; ++e) {
        const int64_t base = e * ms.rows * ms.cols, n = ms.rows * ms.cols;
        // Momentum and the matrix to orthogonalize (transposed if tall).
#pragma omp parallel for schedule(static) if(n >= OPTIM_PARALLEL_MIN)
        for (int64_t i = 0; i < n; ++i) {
            float u0 = muon_momentum_element(grad_at(s, base + i), Bm[base + i], mu, opt.ema_momentum, opt.nesterov);
            if (transpose) {
                int64_t r = i / ms.cols, c = i - r * ms.cols;
                X[size_t(c * ms.rows + r)] = u0;
            } else {
                X[size_t(i)] = u0;
            }
        }
        newton_schulz(X.data(), a, b, opt.ns_steps, A, B, Y);
        for_each_write(s, wb, base, base + n, [&](int64_t j) {
            int64_t i = j - base, r = i / ms.cols, c = i - r * ms.cols;
            float o = transpose ? X[size_t(c * ms.rows + r)] : X[size_t(i)];
            return o * shape_scale;
        });
    }
}

}  // namespace skew::optim_detail
