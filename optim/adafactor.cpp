// Adafactor on the CPU with HuggingFace semantics as the paper ran it (scale_parameter=False,
// relative_step=False, beta1=None; docs/optimizers.md §5): eps1 added to G^2 before the means,
// beta2_t = 1 - t^-0.8, U = G / sqrt(R_i C_j / mean(R)), RMS clip before the lr, decay -lr*wd*W.
#include <cmath>
#include <vector>

#include "optim/optim_internal.h"

namespace skew::optim_detail {

void adafactor_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    require_whole(s, "adafactor");
    const ParamInfo& p = *s.info;
    const double beta_t = adafactor_beta2(step.t, opt.decay_rate);
    const float b = float(beta_t), omb = float(1.0 - beta_t), eps1 = float(opt.eps1);
    const WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);

    if (pol.second_moment == SecondMomentKind::FULL) {
        float* V = need_state(s, StateKind::SECOND_FULL);
        const int64_t n = p.numel();
        const double sumsq = sum_of_squares(n, [&](int64_t i) {
            float v = V[i];
            return adafactor_full_element(grad_at(s, i), v, b, omb, eps1);
        });
        const float clip = std::fmax(1.0f, float(std::sqrt(sumsq / double(n)) / opt.update_clip));
        for_each_write(s, wb, 0, n,
                       [&](int64_t i) { return adafactor_full_element(grad_at(s, i), V[i], b, omb, eps1) / clip; });
        return;
    }

    MatrixShape ms = matrix_shape(p);
    float* R = need_state(s, StateKind::SECOND_ROW);
    float* C = need_state(s, StateKind::SECOND_COL);
    std::vector<double> rmean(size_t(ms.rows)), cmean(size_t(ms.cols));
    for (int64_t e = 0; e < ms.count; ++e) {
        float* Re = R + e * ms.rows;
        float* Ce = C + e * ms.cols;
        factored_means(s, e, ms.rows, ms.cols, eps1, rmean.data(), cmean.data());
        double rsum = 0;
        for (int64_t r = 0; r < ms.rows; ++r) {
            Re[r] = optim_ema(Re[r], float(rmean[size_t(r)]), b, omb);
            rsum += Re[r];
        }
        for (int64_t c = 0; c < ms.cols; ++c) Ce[c] = optim_ema(Ce[c], float(cmean[size_t(c)]), b, omb);
        const float rm = float(rsum / double(ms.rows));
        const int64_t base = e * ms.rows * ms.cols, n = ms.rows * ms.cols;
        const double sumsq = sum_of_squares(n, [&](int64_t i) {
            int64_t r = i / ms.cols, c = i - r * ms.cols;
            return adafactor_factored_element(grad_at(s, base + i), Re[r], rm, Ce[c]);
        });
        const float clip = std::fmax(1.0f, float(std::sqrt(sumsq / double(n)) / opt.update_clip));
        for_each_write(s, wb, base, base + n, [&](int64_t j) {
            int64_t i = j - base, r = i / ms.cols, c = i - r * ms.cols;
            return adafactor_factored_element(grad_at(s, j), Re[r], rm, Ce[c]) / clip;
        });
    }
}

}  // namespace skew::optim_detail
