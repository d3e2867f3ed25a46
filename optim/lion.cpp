// Lion on the CPU (docs/sources.md, Lion: Chen et al. 2023 Alg. 2; docs/optimizers.md §3):
// U = sign(b1 m + (1-b1) g), m <- b2 m + (1-b2) g, decay fused in fp32 into the value rounded.
#include "optim/optim_internal.h"

namespace skew::optim_detail {

void lion_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step) {
    float* m = need_state(s, StateKind::MOMENTUM);
    const float b1 = float(opt.beta1), omb1 = float(1.0 - opt.beta1);
    const float b2 = float(opt.beta2), omb2 = float(1.0 - opt.beta2);
    const WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
    const int64_t n = slot_count(s);
    for_each_write(s, wb, 0, n, [&](int64_t i) { return lion_element(grad_at(s, i), m[i], b1, omb1, b2, omb2); });
}

}  // namespace skew::optim_detail
