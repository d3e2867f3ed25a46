// AdamW on the CPU with PyTorch semantics (docs/optimizers.md §2): eps added to sqrt(v_hat),
// decoupled decay lr*wd fused in fp32 into the value rounded (docs/design.md "Weight decay"). The same
// elementwise Adam serves Muon's internal Adam and GaLore's unprojected parameters.
#include <cmath>

#include "optim/optim_internal.h"

namespace skew::optim_detail {

void adam_elementwise(const OptimizerConfig& opt, const ParamSlot& s, float* m, float* v, double b1, double b2,
                      double eps, bool bias_correct, double lr_update, double wd, const OptimStep& step) {
    const double t = double(step.t);
    const float inv_bc1 = bias_correct ? float(1.0 / (1.0 - std::pow(b1, t))) : 1.0f;
    const float inv_sqrt_bc2 = bias_correct ? float(1.0 / std::sqrt(1.0 - std::pow(b2, t))) : 1.0f;
    const float fb1 = float(b1), fomb1 = float(1.0 - b1), fb2 = float(b2), fomb2 = float(1.0 - b2);
    const float feps = float(eps);
    const WriteBack wb = make_write_back(opt, s, step, lr_update, step.lr, wd);
    const int64_t n = slot_count(s);
    for_each_write(s, wb, 0, n, [&](int64_t i) {
        return adamw_element(grad_at(s, i), m[i], v[i], fb1, fomb1, fb2, fomb2, inv_bc1, inv_sqrt_bc2, feps);
    });
}

void adamw_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    adam_elementwise(opt, s, need_state(s, StateKind::MOMENTUM), need_state(s, StateKind::SECOND_FULL), opt.beta1,
                     opt.beta2, opt.eps, true, step.lr, pol.weight_decay, step);
}

}  // namespace skew::optim_detail
