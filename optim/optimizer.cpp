// The tier policy as data, the per-parameter state layout (paper Eq. 2; docs/optimizers.md §1),
// the common entry optimizer_step and host state storage.
#include "optim/optimizer.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"
#include "optim/optim_internal.h"

namespace skew {

bool muon_uses_adam(const ParamInfo& p) {
    return p.is_vector() || p.role == Role::TOKEN_EMBEDDING || p.role == Role::POSITION_EMBEDDING ||
           p.role == Role::OUTPUT_HEAD || p.role == Role::ROUTER;
}

static bool is_attn_or_mlp(Role r) {
    switch (r) {
        case Role::ATTN_Q:
        case Role::ATTN_K:
        case Role::ATTN_V:
        case Role::ATTN_O:
        case Role::FFN_W1:
        case Role::FFN_W2:
        case Role::FFN_W3:
        case Role::EXPERT_W1:
        case Role::EXPERT_W2:
        case Role::EXPERT_W3:
        case Role::SHARED_EXPERT_W1:
        case Role::SHARED_EXPERT_W2:
        case Role::SHARED_EXPERT_W3: return true;
        default: return false;
    }
}

ParamPolicy param_policy(const OptimizerConfig& opt, const ParamInfo& p) {
    ParamPolicy pol;
    pol.kind = opt.type;
    // The baselines decay backbone and experts with opt.weight_decay and never the router.
    pol.weight_decay = p.tier == Tier::ROUTER ? 0.0 : opt.weight_decay;
    switch (pol.kind) {
        case OptimizerType::SKEWADAM: {
            const TierPolicy& tp = opt.tiers[size_t(p.tier)];
            pol.momentum = tp.momentum;
            pol.second_moment = tp.second_moment;
            if (pol.second_moment == SecondMomentKind::FACTORED && p.is_vector())
                pol.second_moment = SecondMomentKind::FULL;
            pol.weight_decay = tp.weight_decay;
            break;
        }
        case OptimizerType::ADAMW:
            pol.momentum = MomentumKind::FP32;
            pol.second_moment = SecondMomentKind::FULL;
            break;
        case OptimizerType::LION: pol.momentum = MomentumKind::FP32; break;
        case OptimizerType::MUON:
        case OptimizerType::MUON_KJ:
            pol.muon_adam = p.is_vector() || muon_uses_adam(p);
            pol.momentum = MomentumKind::FP32;
            pol.second_moment = pol.muon_adam ? SecondMomentKind::FULL : SecondMomentKind::NONE;
            break;
        case OptimizerType::ADAFACTOR:
            pol.second_moment = p.is_vector() ? SecondMomentKind::FULL : SecondMomentKind::FACTORED;
            break;
        case OptimizerType::GALORE:
        case OptimizerType::GALORE_PAPER: {
            bool matrix = !p.is_vector();
            pol.galore_project = pol.kind == OptimizerType::GALORE ? matrix && is_attn_or_mlp(p.role) : matrix;
            pol.momentum = MomentumKind::FP32;
            pol.second_moment = SecondMomentKind::FULL;
            if (pol.galore_project) pol.galore_rank = std::min({opt.rank, p.rows(), p.cols()});
            break;
        }
    }
    return pol;
}

int64_t StateSlotSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

/// Prefix the matrix count (experts of a stack, else 1) to a per-matrix shape.
static std::vector<int64_t> stacked(const ParamInfo& p, std::vector<int64_t> per) {
    per.insert(per.begin(), p.n_matrices());
    return per;
}

std::vector<StateSlotSpec> optimizer_param_state(const OptimizerConfig& opt, const ParamInfo& p) {
    ParamPolicy pol = param_policy(opt, p);
    std::vector<StateSlotSpec> out;
    const int64_t rows = p.rows(), cols = p.cols();
    switch (pol.kind) {
        case OptimizerType::MUON:
        case OptimizerType::MUON_KJ:
            if (pol.muon_adam) {
                out.push_back({StateKind::ADAM_M, p.shape});
                out.push_back({StateKind::ADAM_V, p.shape});
            } else {
                out.push_back({StateKind::MOMENTUM, p.shape});
            }
            return out;
        case OptimizerType::GALORE:
        case OptimizerType::GALORE_PAPER:
            if (!pol.galore_project) {  // plain Adam off the projected matrices
                out.push_back({StateKind::ADAM_M, p.shape});
                out.push_back({StateKind::ADAM_V, p.shape});
                return out;
            }
            {
                int64_t r = pol.galore_rank;
                if (pol.kind == OptimizerType::GALORE_PAPER) {
                    out.push_back({StateKind::GALORE_P, stacked(p, {rows, r})});
                    out.push_back({StateKind::GALORE_Q, stacked(p, {r, cols})});
                    out.push_back({StateKind::GALORE_M, stacked(p, {r, r})});
                    out.push_back({StateKind::GALORE_V, stacked(p, {r, r})});
                } else if (rows >= cols) {
                    out.push_back({StateKind::GALORE_P, stacked(p, {r, cols})});
                    out.push_back({StateKind::GALORE_M, stacked(p, {rows, r})});
                    out.push_back({StateKind::GALORE_V, stacked(p, {rows, r})});
                } else {
                    out.push_back({StateKind::GALORE_P, stacked(p, {rows, r})});
                    out.push_back({StateKind::GALORE_M, stacked(p, {r, cols})});
                    out.push_back({StateKind::GALORE_V, stacked(p, {r, cols})});
                }
            }
            return out;
        default: break;
    }
    if (pol.momentum == MomentumKind::FP32) out.push_back({StateKind::MOMENTUM, p.shape});
    if (pol.second_moment == SecondMomentKind::FULL) out.push_back({StateKind::SECOND_FULL, p.shape});
    if (pol.second_moment == SecondMomentKind::FACTORED) {
        out.push_back({StateKind::SECOND_ROW, stacked(p, {rows})});
        out.push_back({StateKind::SECOND_COL, stacked(p, {cols})});
    }
    return out;
}

int64_t optimizer_state_bytes(const OptimizerConfig& opt, const ParamTable& table) {
    int64_t bytes = 0;
    for (const ParamInfo& p : table.params)
        for (const StateSlotSpec& s : optimizer_param_state(opt, p)) bytes += 4 * s.numel();
    return bytes;
}

void allocate_host_state(const OptimizerConfig& opt, std::span<ParamSlot> params, HostOptimState& storage) {
    storage.buffers.clear();
    size_t n = 0;
    for (const ParamSlot& s : params) n += optimizer_param_state(opt, *s.info).size();
    storage.buffers.reserve(n);
    for (ParamSlot& s : params) {
        s.state.fill(nullptr);
        for (const StateSlotSpec& spec : optimizer_param_state(opt, *s.info)) {
            storage.buffers.emplace_back(size_t(spec.numel()), 0.0f);
            s.state[size_t(spec.kind)] = storage.buffers.back().data();
        }
    }
}

bool optimizer_folds_grad_scale(const OptimizerConfig& opt) {
    switch (opt.type) {
        case OptimizerType::SKEWADAM:
        case OptimizerType::ADAMW:
        case OptimizerType::LION:
        case OptimizerType::ADAFACTOR: return true;
        default: return false;
    }
}

void optimizer_step(const OptimizerConfig& opt, std::span<ParamSlot> params, const OptimStep& step) {
    if (step.t < 1) fail("optimizer '{}': step t must be >= 1 (got {})", opt.name, step.t);
    if (step.grad_scale != 1.0f && !optimizer_folds_grad_scale(opt))
        fail("optimizer '{}': type {} does not fold a gradient scale ({}); rescale the gradients first", opt.name,
             opt.type, step.grad_scale);
    for (const ParamSlot& slot : params) {
        if (!slot.info) fail("optimizer '{}': a parameter slot has no ParamInfo", opt.name);
        if (!slot.grad) continue;  // no gradient this step: no step at all (docs/optimizers.md §7.2 item 11)
        ParamSlot s = slot;
        s.grad_scale = step.grad_scale;
        ParamPolicy pol = param_policy(opt, *s.info);
        switch (pol.kind) {
            case OptimizerType::SKEWADAM: optim_detail::skewadam_step(opt, s, pol, step); break;
            case OptimizerType::ADAMW: optim_detail::adamw_step(opt, s, pol, step); break;
            case OptimizerType::LION: optim_detail::lion_step(opt, s, pol, step); break;
            case OptimizerType::MUON:
            case OptimizerType::MUON_KJ: optim_detail::muon_step(opt, s, pol, step); break;
            case OptimizerType::ADAFACTOR: optim_detail::adafactor_step(opt, s, pol, step); break;
            case OptimizerType::GALORE:
            case OptimizerType::GALORE_PAPER: optim_detail::galore_step(opt, s, pol, step); break;
        }
    }
}

double optimizer_bytes_per_param(const OptimizerConfig& opt, const ParamInfo& p, DType grad_dtype) {
    const double w = double(dtype_bytes(p.dtype)), g = double(dtype_bytes(grad_dtype));
    const double n = double(p.numel());
    double small = 0;  // factored / projected state, per element
    for (const StateSlotSpec& s : optimizer_param_state(opt, p))
        if (s.numel() != p.numel()) small += 2.0 * 4.0 * double(s.numel()) / n;
    ParamPolicy pol = param_policy(opt, p);
    double full = 0;  // full-size fp32 state tensors, read + written each
    for (const StateSlotSpec& s : optimizer_param_state(opt, p))
        if (s.numel() == p.numel()) full += 1;
    switch (pol.kind) {
        case OptimizerType::ADAMW:
        case OptimizerType::LION: return 2 * w + g + 8 * full;
        case OptimizerType::SKEWADAM:
        case OptimizerType::ADAFACTOR: {
            bool factored = pol.second_moment == SecondMomentKind::FACTORED;
            // reduction pass over G (factored), RMS pass over G and state, fused write pass
            double reads = (factored ? g : 0) + (g + 4 * full) + (w + g + 4 * full);
            return reads + w + 4 * full + small;
        }
        case OptimizerType::MUON:
        case OptimizerType::MUON_KJ:
            if (pol.muon_adam) return 2 * w + g + 8 * full;
            // momentum pass, NS (3 steps over fp32 copies: counted as 4 fp32 passes), write pass
            return (g + 8) + 4 * 4 * double(opt.ns_steps) + (w + 4) + w + small;
        case OptimizerType::GALORE:
        case OptimizerType::GALORE_PAPER:
            if (!pol.galore_project) return 2 * w + g + 8 * full;
            return 2 * w + 2 * g + 4 + small;  // projection read of G, back-projection write of the update
    }
    return 0;
}

namespace optim_detail {

void factored_means(const ParamSlot& s, int64_t e, int64_t rows, int64_t cols, float add, double* rowmean,
                    double* colmean) {
    const int64_t base = e * rows * cols;
#pragma omp parallel for schedule(static) if (rows * cols >= OPTIM_PARALLEL_MIN)
    for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) {
            float g = grad_at(s, base + r * cols + c);
            acc += double(g * g + add);
        }
        rowmean[r] = acc / double(cols);
    }
    const int64_t CB = 256;  // column block: each thread sweeps all rows of its block (row-major reads)
    const int64_t nblk = (cols + CB - 1) / CB;
#pragma omp parallel for schedule(static) if (rows * cols >= OPTIM_PARALLEL_MIN)
    for (int64_t b = 0; b < nblk; ++b) {
        int64_t c0 = b * CB, c1 = std::min(cols, c0 + CB);
        double acc[256] = {};
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = c0; c < c1; ++c) {
                float g = grad_at(s, base + r * cols + c);
                acc[c - c0] += double(g * g + add);
            }
        for (int64_t c = c0; c < c1; ++c) colmean[c] = acc[c - c0] / double(rows);
    }
}

}  // namespace optim_detail

}  // namespace skew
