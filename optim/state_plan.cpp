// The optimizer's declarations to the memory plan (paper Eq. 2 generalized to every optimizer and
// tier policy, docs/optimizers.md §1): each buffer is one StateSlotSpec of optimizer_param_state,
// so the plan, the arena and the step agree by construction. Each expert matrix of a stacked bank
// is its own W: its factored R and C are (n_experts, rows) and (n_experts, cols) (docs/design.md,
// "Optimizers").
#include "optim/state_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/error.h"
#include "kernels/cuda/workspace_sizes.h"
#include "optim/optim_internal.h"

namespace skew {
namespace {

std::string tier_title(Tier t) {
    switch (t) {
        case Tier::BACKBONE: return "Backbone";
        case Tier::EXPERTS: return "Expert";
        case Tier::ROUTER: return "Router";
        case Tier::SHARED_EXPERTS: return "Shared expert";
    }
    return "?";
}

/// The Appendix B row a state tensor of `p` is counted in (the `skew plan` table's labels).
std::string state_component(const ParamPolicy& pol, const ParamInfo& p, StateKind kind) {
    const std::string tt = tier_title(p.tier);
    switch (pol.kind) {
        case OptimizerType::SKEWADAM:
            if (kind == StateKind::MOMENTUM) return tt + " momentum (fp32)";
            if (p.is_vector() && p.tier == Tier::SHARED_EXPERTS) return tt + " gates, full 2nd moment";
            if (p.is_vector()) return tt + " vector params (norms), full 2nd moment";
            if (pol.second_moment == SecondMomentKind::FULL) return tt + " full 2nd moment";
            return tt + " factored 2nd moments";
        case OptimizerType::ADAMW: return tt + " m, v (fp32)";
        case OptimizerType::LION: return tt + " momentum (fp32)";
        case OptimizerType::MUON:
        case OptimizerType::MUON_KJ:
            if (pol.muon_adam) return "Internal Adam m, v (embeddings, positions, router, vectors)";
            return tt + " Muon momentum (fp32)";
        case OptimizerType::ADAFACTOR:
            if (p.is_vector()) return tt + " vector params, full 2nd moment";
            return tt + " factored 2nd moments";
        case OptimizerType::GALORE:
            if (!pol.galore_project) return "AdamW m, v off the GaLore matrices";
            return tt + " GaLore projector + projected m, v";
        case OptimizerType::GALORE_PAPER:
            if (!pol.galore_project) return "Adam m, v on vectors";
            return tt + " GaLore U, V^T + r x r m, v";
    }
    return "?";
}

}  // namespace

std::vector<BufferSpec> optimizer_state_buffers(const OptimizerConfig& opt, const ParamTable& table) {
    std::vector<BufferSpec> out;
    for (const ParamInfo& p : table.params) {
        const ParamPolicy pol = param_policy(opt, p);
        for (StateSlotSpec& s : optimizer_param_state(opt, p)) {
            BufferSpec b;
            b.name = state_buffer_name(p.name, s.kind);
            b.kind = BufferKind::STATE;
            b.dtype = DType::F32;
            b.shape = std::move(s.shape);
            b.first = Phase::FORWARD;
            b.last = Phase::OPTIMIZER;
            b.param = int(p.index);
            b.state = s.kind;
            b.component = state_component(pol, p, s.kind);
            out.push_back(std::move(b));
        }
    }
    return out;
}

int64_t paper_state_bytes(const OptimizerConfig& opt, const ParamTable& table) {
    if (uses_muon_step(opt.type)) return 4 * table.total_numel();
    return optimizer_state_bytes(opt, table);
}

int64_t cuda_optimizer_tensor_scratch_bytes(const OptimizerConfig& opt, const ParamInfo& p) {
    const ParamPolicy pol = param_policy(opt, p);
    switch (pol.kind) {
        case OptimizerType::SKEWADAM:
        case OptimizerType::ADAFACTOR:
            // A factored second moment runs per matrix; every other tensor as one 1 x numel matrix.
            if (pol.second_moment == SecondMomentKind::FACTORED)
                return cuda_ws::optim_update_scratch_bytes(p.n_matrices(), p.rows(), p.cols());
            return cuda_ws::optim_update_scratch_bytes(1, 1, p.numel());
        case OptimizerType::MUON:
        case OptimizerType::MUON_KJ:
            return pol.muon_adam ? 0 : cuda_ws::muon_scratch_bytes(p.n_matrices(), p.rows(), p.cols());
        case OptimizerType::GALORE:
        case OptimizerType::GALORE_PAPER: {
            if (!pol.galore_project) return 0;
            const optim_detail::MatrixShape ms = optim_detail::matrix_shape(p);
            return cuda_ws::galore_scratch_bytes(ms.count, ms.rows, ms.cols, pol.galore_rank,
                                                 pol.kind == OptimizerType::GALORE_PAPER);
        }
        default: return 0;
    }
}

int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table) {
    int64_t need = 0;
    for (const ParamInfo& p : table.params) need = std::max(need, cuda_optimizer_tensor_scratch_bytes(opt, p));
    return need;
}

BufferSpec optimizer_scratch_buffer(const OptimizerConfig& opt, const ParamTable& table, BackendChoice backend) {
    const OptimizerType kind = opt.type;
    const bool muon = uses_muon_step(kind);
    const bool galore = kind == OptimizerType::GALORE || kind == OptimizerType::GALORE_PAPER;
    int64_t max_matrix = 0, max_rows_cols = 0;
    for (const ParamInfo& p : table.params) {
        if (p.is_vector() || (muon && muon_uses_adam(p))) continue;
        max_matrix = std::max(max_matrix, p.rows() * p.cols());
        max_rows_cols = std::max(max_rows_cols, p.n_matrices() * (p.rows() + p.cols()));
    }
    BufferSpec ws;
    ws.name = ws_buffer::OPTIMIZER;
    ws.kind = BufferKind::WORKSPACE;
    ws.dtype = DType::F32;
    ws.shape = {muon ? 4 * max_matrix : galore ? 2 * max_matrix : std::max<int64_t>(max_rows_cols, 1024)};
    if (backend == BackendChoice::CUDA)
        ws.shape[0] = std::max(ws.shape[0], (cuda_optimizer_scratch_bytes(opt, table) + 3) / 4);
    ws.first = ws.last = Phase::OPTIMIZER;
    ws.component = "workspace";
    return ws;
}

}  // namespace skew
