// Optimizer state as plan buffers: the closed form of paper Eq. 2 generalized to every optimizer
// and tier policy (research/optimizers.md §1). Each expert matrix of a stacked bank is its own W:
// its factored R and C are (n_experts, rows) and (n_experts, cols) (design.md, "Optimizers").
#include <fmt/format.h>

#include <algorithm>

#include "engine/error.h"
#include "engine/memory_plan.h"

namespace skew {

const char* state_kind_name(StateKind k) {
    switch (k) {
        case StateKind::MOMENTUM: return "m";
        case StateKind::SECOND_FULL: return "v";
        case StateKind::SECOND_ROW: return "row";
        case StateKind::SECOND_COL: return "col";
        case StateKind::ADAM_M: return "adam_m";
        case StateKind::ADAM_V: return "adam_v";
        case StateKind::GALORE_P: return "galore_p";
        case StateKind::GALORE_Q: return "galore_q";
        case StateKind::GALORE_M: return "galore_m";
        case StateKind::GALORE_V: return "galore_v";
    }
    return "?";
}

bool muon_uses_adam(const ParamInfo& p) {
    return p.is_vector() || p.role == Role::TOKEN_EMBEDDING || p.role == Role::POSITION_EMBEDDING ||
           p.role == Role::ROUTER;
}

namespace {

std::string tier_title(Tier t) {
    switch (t) {
        case Tier::BACKBONE: return "Backbone";
        case Tier::EXPERTS: return "Expert";
        case Tier::ROUTER: return "Router";
    }
    return "?";
}

struct StateBuilder {
    const ParamTable& table;
    std::vector<BufferSpec> out;

    void add(const ParamInfo& p, StateKind kind, std::vector<int64_t> shape, std::string component) {
        BufferSpec b;
        b.name = fmt::format("state.{}.{}", p.name, state_kind_name(kind));
        b.kind = BufferKind::STATE;
        b.dtype = DType::F32;
        b.shape = std::move(shape);
        b.first = Phase::FORWARD;
        b.last = Phase::OPTIMIZER;
        b.param = int(p.index);
        b.state = kind;
        b.component = std::move(component);
        out.push_back(std::move(b));
    }
    void momentum(const ParamInfo& p, const std::string& component) { add(p, StateKind::MOMENTUM, p.shape, component); }
    void full(const ParamInfo& p, const std::string& component) { add(p, StateKind::SECOND_FULL, p.shape, component); }
    void factored(const ParamInfo& p, const std::string& component) {
        add(p, StateKind::SECOND_ROW, {p.n_matrices(), p.rows()}, component);
        add(p, StateKind::SECOND_COL, {p.n_matrices(), p.cols()}, component);
    }
    void adam(const ParamInfo& p, const std::string& component) {
        add(p, StateKind::ADAM_M, p.shape, component);
        add(p, StateKind::ADAM_V, p.shape, component);
    }
};

bool galore_reference_target(const ParamInfo& p) {
    switch (p.role) {
        case Role::ATTN_Q: case Role::ATTN_K: case Role::ATTN_V: case Role::ATTN_O:
        case Role::FFN_W1: case Role::FFN_W2: case Role::FFN_W3:
        case Role::EXPERT_W1: case Role::EXPERT_W2: case Role::EXPERT_W3:
            return true;
        default:
            return false;
    }
}

}  // namespace

std::vector<BufferSpec> optimizer_state_buffers(const OptimizerConfig& opt, const ParamTable& table) {
    StateBuilder s{table, {}};
    const std::string& type = opt.type;
    for (const ParamInfo& p : table.params) {
        const std::string tt = tier_title(p.tier);
        if (type == "skewadam") {
            const TierPolicy& tp = opt.tiers[int(p.tier)];
            if (tp.momentum == MomentumKind::FP32) s.momentum(p, tt + " momentum (fp32)");
            if (tp.second_moment == SecondMomentKind::NONE) continue;
            if (p.is_vector())
                s.full(p, tt + " vector params (norms), full 2nd moment");
            else if (tp.second_moment == SecondMomentKind::FULL)
                s.full(p, tt + " full 2nd moment");
            else
                s.factored(p, tt + " factored 2nd moments");
        } else if (type == "adamw") {
            s.add(p, StateKind::MOMENTUM, p.shape, tt + " m, v (fp32)");
            s.add(p, StateKind::SECOND_FULL, p.shape, tt + " m, v (fp32)");
        } else if (type == "lion") {
            s.momentum(p, tt + " momentum (fp32)");
        } else if (type == "muon" || type == "muon-kj") {
            if (muon_uses_adam(p))
                s.adam(p, "Internal Adam m, v (embeddings, positions, router, vectors)");
            else
                s.momentum(p, tt + " Muon momentum (fp32)");
        } else if (type == "adafactor") {
            if (p.is_vector())
                s.full(p, tt + " vector params, full 2nd moment");
            else
                s.factored(p, tt + " factored 2nd moments");
        } else if (type == "galore") {
            if (!galore_reference_target(p)) {
                s.adam(p, "AdamW m, v off the GaLore matrices");
                continue;
            }
            const int64_t m = p.rows(), n = p.cols(), e = p.n_matrices();
            const int64_t r = std::min({opt.rank, m, n});
            const std::string c = tt + " GaLore projector + projected m, v";
            if (m >= n) {
                s.add(p, StateKind::GALORE_P, {e, r, n}, c);
                s.add(p, StateKind::GALORE_M, {e, m, r}, c);
                s.add(p, StateKind::GALORE_V, {e, m, r}, c);
            } else {
                s.add(p, StateKind::GALORE_P, {e, m, r}, c);
                s.add(p, StateKind::GALORE_M, {e, r, n}, c);
                s.add(p, StateKind::GALORE_V, {e, r, n}, c);
            }
        } else if (type == "galore-paper") {
            if (p.is_vector()) {
                s.adam(p, "Adam m, v on vectors");
                continue;
            }
            const int64_t m = p.rows(), n = p.cols(), e = p.n_matrices();
            const int64_t r = std::min({opt.rank, m, n});
            const std::string c = tt + " GaLore U, V^T + r x r m, v";
            s.add(p, StateKind::GALORE_P, {e, m, r}, c);
            s.add(p, StateKind::GALORE_Q, {e, r, n}, c);
            s.add(p, StateKind::GALORE_M, {e, r, r}, c);
            s.add(p, StateKind::GALORE_V, {e, r, r}, c);
        } else {
            fail("optimizer '{}': unknown type '{}'", opt.name, type);
        }
    }
    return std::move(s.out);
}

int64_t paper_state_bytes(const OptimizerConfig& opt, const ParamTable& table) {
    if (opt.type == "muon" || opt.type == "muon-kj") return 4 * table.total_numel();
    int64_t total = 0;
    for (const auto& b : optimizer_state_buffers(opt, table)) total += b.bytes();
    return total;
}

}  // namespace skew
