// SkewAdam on the CPU: paper Algorithm 1 with docs/design.md's clamps (docs/optimizers.md §7).
// Per matrix (each expert of a stack is its own W): factored R, C from row/column means of G^2,
// tier momentum, update RMS clip, one fused write-back. Three passes: means, RMS, write.
#include <cmath>
#include <vector>

#include "optim/optim_internal.h"

namespace skew::optim_detail {

void skewadam_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    require_whole(s, "skewadam");
    const ParamInfo& p = *s.info;
    const bool momentum = pol.momentum == MomentumKind::FP32;
    const float coef = skewadam_numerator_coef(opt, pol, step.t);
    const float b1 = float(opt.beta1), omb1 = float(1.0 - opt.beta1);
    const float b2 = float(opt.beta2), omb2 = float(1.0 - opt.beta2);
    const float eps = float(opt.eps);
    float* M = momentum ? need_state(s, StateKind::MOMENTUM) : nullptr;
    WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);

    if (pol.second_moment == SecondMomentKind::FACTORED) {
        MatrixShape ms = matrix_shape(p);
        float* R = need_state(s, StateKind::SECOND_ROW);
        float* C = need_state(s, StateKind::SECOND_COL);
        std::vector<double> rmean(size_t(ms.rows)), cmean(size_t(ms.cols));
        std::vector<float> rowscale(size_t(ms.rows)), colscale(size_t(ms.cols));
        for (int64_t e = 0; e < ms.count; ++e) {
            float* Re = R + e * ms.rows;
            float* Ce = C + e * ms.cols;
            factored_means(s, e, ms.rows, ms.cols, 0.0f, rmean.data(), cmean.data());
            double rsum = 0;
            for (int64_t r = 0; r < ms.rows; ++r) {
                Re[r] = optim_ema(Re[r], float(rmean[size_t(r)]), b2, omb2);
                rsum += Re[r];
            }
            for (int64_t c = 0; c < ms.cols; ++c) Ce[c] = optim_ema(Ce[c], float(cmean[size_t(c)]), b2, omb2);
            const float rbar = std::fmax(float(rsum / double(ms.rows)), SKEWADAM_RBAR_FLOOR);
            for (int64_t r = 0; r < ms.rows; ++r) rowscale[size_t(r)] = skewadam_row_scale(Re[r], rbar, eps);
            for (int64_t c = 0; c < ms.cols; ++c) colscale[size_t(c)] = skewadam_col_scale(Ce[c], eps);
            const int64_t base = e * ms.rows * ms.cols, n = ms.rows * ms.cols;
            auto update = [&](int64_t i, float& m_new) {  // i relative to the matrix
                int64_t r = i / ms.cols, c = i - r * ms.cols;
                float g = grad_at(s, base + i);
                float num;
                if (momentum) {
                    m_new = M[base + i];
                    num = skewadam_numerator_momentum(g, m_new, b1, omb1, coef);
                } else {
                    num = coef * g;
                }
                return num / rowscale[size_t(r)] / colscale[size_t(c)];
            };
            const double sumsq = sum_of_squares(n, [&](int64_t i) {
                float m_new = 0;
                return update(i, m_new);
            });
            const float clip = std::fmax(1.0f, float(std::sqrt(sumsq / double(n)) / opt.update_clip));
            for_each_write(s, wb, base, base + n, [&](int64_t j) {
                float m_new = 0;
                float u = update(j - base, m_new) / clip;
                if (momentum) M[j] = m_new;
                return u;
            });
        }
        return;
    }

    // Full second moment (router tier, vectors) or none: the whole tensor is one W.
    const int64_t n = p.numel();
    float* V = pol.second_moment == SecondMomentKind::FULL ? need_state(s, StateKind::SECOND_FULL) : nullptr;
    auto update = [&](int64_t i, float& m_new, float& v_new) {
        float g = grad_at(s, i);
        float num;
        if (momentum) {
            m_new = M[i];
            num = skewadam_numerator_momentum(g, m_new, b1, omb1, coef);
        } else {
            num = coef * g;
        }
        if (!V) return num;
        v_new = V[i];
        return num / skewadam_full_denom(g, v_new, b2, omb2, eps);
    };
    const double sumsq = sum_of_squares(n, [&](int64_t i) {
        float m_new = 0, v_new = 0;
        return update(i, m_new, v_new);
    });
    const float clip = std::fmax(1.0f, float(std::sqrt(sumsq / double(n)) / opt.update_clip));
    for_each_write(s, wb, 0, n, [&](int64_t i) {
        float m_new = 0, v_new = 0;
        float u = update(i, m_new, v_new) / clip;
        if (momentum) M[i] = m_new;
        if (V) V[i] = v_new;
        return u;
    });
}

}  // namespace skew::optim_detail
