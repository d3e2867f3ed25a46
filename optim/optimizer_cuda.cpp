// The CUDA optimizer step: resolves each parameter's policy exactly as the CPU step does
// (optim/optimizer.cpp) and calls the fused kernels of kernels/cuda/optim_kernels.cu
// (paper Algorithm 1; docs/optimizers.md §2-§5).
#include "optim/optimizer_cuda.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/muon.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/cuda/optim_kernels.h"
#include "optim/device_write.h"
#include "optim/galore_cuda.h"
#include "optim/optim_internal.h"
#include "optim/state_plan.h"

namespace skew {

namespace {

cuda::OptimTensor device_tensor(const ParamSlot& s) {
    const ParamInfo& p = *s.info;
    optim_detail::MatrixShape ms = optim_detail::matrix_shape(p);
    cuda::OptimTensor t;
    t.weight = s.weight;
    t.weight_f32 = p.dtype == DType::F32;
    t.grad = s.grad;
    t.grad_f32 = s.grad_dtype == DType::F32;
    t.n_mat = ms.count;
    t.rows = ms.rows;
    t.cols = ms.cols;
    return t;
}

int64_t slot_scratch(const OptimizerConfig& opt, const ParamSlot& s) {
    return cuda_optimizer_tensor_scratch_bytes(opt, *s.info);  // the plan's size model (optim/state_plan.h)
}

}  // namespace

int64_t optimizer_cuda_scratch_bytes(const OptimizerConfig& opt, std::span<const ParamSlot> params) {
    int64_t need = 0;
    for (const ParamSlot& s : params) need = std::max(need, slot_scratch(opt, s));
    return need;
}

void optimizer_step_cuda(const OptimizerConfig& opt, std::span<ParamSlot> params, const OptimStep& step,
                         const CudaOptimContext& ctx) {
    using namespace optim_detail;
    if (step.t < 1) fail("optimizer '{}': step t must be >= 1 (got {})", opt.name, step.t);
    if (step.grad_scale != 1.0f && !optimizer_folds_grad_scale(opt))
        fail("optimizer '{}': type {} does not fold a gradient scale ({}); rescale the gradients first", opt.name,
             opt.type, step.grad_scale);
    const double t = double(step.t);
    for (const ParamSlot& s : params) {
        if (!s.info) fail("optimizer '{}': a parameter slot has no ParamInfo", opt.name);
        if (!s.grad) continue;
        require_whole(s, "the CUDA step");
        if (s.element_base % 4 != 0)  // the kernels draw one Philox block per 4 aligned elements
            fail("optimizer '{}': tensor '{}' starts at element {} of its parameter, not a multiple of 4", opt.name,
                 s.info->name, s.element_base);
        const ParamInfo& p = *s.info;
        ParamPolicy pol = param_policy(opt, p);
        if (slot_scratch(opt, s) > ctx.scratch_bytes)
            fail("optimizer '{}': tensor '{}' needs {} bytes of scratch, {} given", opt.name, p.name,
                 slot_scratch(opt, s), ctx.scratch_bytes);
        // Nsight Systems: one range per tensor, named by its tier ("optimizer experts blocks.1.moe.experts.w1").
        SKEW_NVTX_RANGE(fmt::format("optimizer {} {}", p.tier, p.name).c_str());
        cuda::OptimTensor dt = device_tensor(s);
        dt.grad_scale = step.grad_scale;
        switch (pol.kind) {
            case OptimizerType::SKEWADAM:
            case OptimizerType::ADAFACTOR: {
                cuda::OptimUpdate u;
                u.clip_threshold = opt.update_clip;
                u.matrix_by_matrix = ctx.matrix_by_matrix;
                if (pol.kind == OptimizerType::SKEWADAM) {
                    const bool momentum = pol.momentum == MomentumKind::FP32;
                    u.kind = pol.second_moment == SecondMomentKind::FACTORED ? cuda::OPTIM_SKEWADAM_FACTORED
                             : pol.second_moment == SecondMomentKind::FULL   ? cuda::OPTIM_SKEWADAM_FULL
                                                                             : cuda::OPTIM_SKEWADAM_NONE;
                    u.coef = skewadam_numerator_coef(opt, pol, step.t);
                    u.M = momentum ? need_state(s, StateKind::MOMENTUM) : nullptr;
                    u.b1 = float(opt.beta1);
                    u.omb1 = float(1.0 - opt.beta1);
                    u.b2 = float(opt.beta2);
                    u.omb2 = float(1.0 - opt.beta2);
                    u.eps = float(opt.eps);
                } else {
                    const double beta_t = adafactor_beta2(step.t, opt.decay_rate);
                    u.kind = pol.second_moment == SecondMomentKind::FACTORED ? cuda::OPTIM_ADAFACTOR_FACTORED
                                                                             : cuda::OPTIM_ADAFACTOR_FULL;
                    u.b2 = float(beta_t);
                    u.omb2 = float(1.0 - beta_t);
                    u.eps = float(opt.eps1);
                }
                if (pol.second_moment == SecondMomentKind::FACTORED) {
                    u.R = need_state(s, StateKind::SECOND_ROW);
                    u.C = need_state(s, StateKind::SECOND_COL);
                } else if (pol.second_moment == SecondMomentKind::FULL) {
                    u.V = need_state(s, StateKind::SECOND_FULL);
                    dt.n_mat = 1;  // the whole tensor is one W (one RMS clip)
                    dt.rows = 1;
                    dt.cols = p.numel();
                } else {
                    dt.n_mat = 1;
                    dt.rows = 1;
                    dt.cols = p.numel();
                }
                WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
                cuda::optim_skewadam_adafactor_step(dt, u, device_write(wb), ctx.scratch, ctx.stream);
                break;
            }
            case OptimizerType::ADAMW: {
                const float inv_bc1 = float(1.0 / (1.0 - std::pow(opt.beta1, t)));
                const float inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(opt.beta2, t)));
                WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
                cuda::optim_adamw_step(dt, need_state(s, StateKind::MOMENTUM), need_state(s, StateKind::SECOND_FULL),
                                       opt.beta1, opt.beta2, inv_bc1, inv_sqrt_bc2, float(opt.eps), device_write(wb),
                                       ctx.stream);
                break;
            }
            case OptimizerType::LION: {
                WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
                cuda::optim_lion_step(dt, need_state(s, StateKind::MOMENTUM), opt.beta1, opt.beta2, device_write(wb),
                                      ctx.stream);
                break;
            }
            case OptimizerType::MUON:
            case OptimizerType::MUON_KJ: {
                if (pol.muon_adam) {
                    const double lr_adam = opt.lr > 0 ? opt.adam_lr * step.lr / opt.lr : 0.0;
                    const float inv_bc1 = float(1.0 / (1.0 - std::pow(opt.beta1, t)));
                    const float inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(opt.beta2, t)));
                    WriteBack wb = make_write_back(opt, s, step, lr_adam, step.lr, 0.0);
                    cuda::optim_adamw_step(dt, need_state(s, StateKind::ADAM_M), need_state(s, StateKind::ADAM_V),
                                           opt.beta1, opt.beta2, inv_bc1, inv_sqrt_bc2, float(opt.eps),
                                           device_write(wb), ctx.stream);
                    break;
                }
                const float shape_scale =
                    opt.shape_scale ? float(std::sqrt(std::fmax(1.0, double(dt.rows) / double(dt.cols)))) : 1.0f;
                WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
                cuda::MuonArgs ma;
                ma.mu = float(opt.muon_momentum);
                ma.ema = opt.ema_momentum;
                ma.nesterov = opt.nesterov;
                ma.ns_steps = opt.ns_steps;
                ma.shape_scale = shape_scale;
                cuda::muon_step(dt, need_state(s, StateKind::MOMENTUM), ma, device_write(wb), ctx.scratch,
                                ctx.scratch_bytes, ctx.stream);
                break;
            }
            case OptimizerType::GALORE:
            case OptimizerType::GALORE_PAPER: {
                if (pol.galore_project) {
                    galore_step_cuda(opt, s, step, ctx);
                    break;
                }
                // Off the projected matrices: Adam (reference: AdamW, bias corrected; paper: uncorrected).
                const bool corrected = pol.kind == OptimizerType::GALORE;
                const float inv_bc1 = corrected ? float(1.0 / (1.0 - std::pow(opt.beta1, t))) : 1.0f;
                const float inv_sqrt_bc2 = corrected ? float(1.0 / std::sqrt(1.0 - std::pow(opt.beta2, t))) : 1.0f;
                WriteBack wb = make_write_back(opt, s, step, step.lr, step.lr, pol.weight_decay);
                cuda::optim_adamw_step(dt, need_state(s, StateKind::ADAM_M), need_state(s, StateKind::ADAM_V),
                                       opt.beta1, opt.beta2, inv_bc1, inv_sqrt_bc2, float(opt.eps), device_write(wb),
                                       ctx.stream);
                break;
            }
        }
    }
}

}  // namespace skew
