// The memory plan (paper Eq. 2, Appendix B): weights, gradients, optimizer state, activations and
// workspace as buffers with lifetimes, laid out by the arena's algorithm so that the plan's peak
// is exactly the arena a run allocates.
#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/arena.h"
#include "engine/error.h"

namespace skew {

int64_t BufferSpec::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

int64_t BufferSpec::bytes() const { return numel() * dtype_bytes(dtype); }

int MemoryPlan::find(const std::string& name) const {
    for (size_t i = 0; i < buffers.size(); ++i)
        if (buffers[i].name == name) return int(i);
    return -1;
}

namespace {

std::string state_kept(StateKind k) {
    switch (k) {
        case StateKind::MOMENTUM: return "m";
        case StateKind::SECOND_FULL: return "v";
        case StateKind::SECOND_ROW:
        case StateKind::SECOND_COL: return "R, C";
        case StateKind::ADAM_M:
        case StateKind::ADAM_V: return "m, v";
        case StateKind::GALORE_P:
        case StateKind::GALORE_Q: return "projector";
        case StateKind::GALORE_M:
        case StateKind::GALORE_V: return "m, v";
    }
    return "?";
}

}  // namespace

MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, int64_t microbatch) {
    if (microbatch < 1) fail("plan: microbatch must be >= 1 (got {})", microbatch);
    if (cfg.train.batch_size % microbatch != 0)
        fail("plan: microbatch {} does not divide train.batch_size {}", microbatch, cfg.train.batch_size);
    MemoryPlan plan;
    plan.optimizer = opt.name;
    plan.microbatch = microbatch;
    plan.seq_len = cfg.train.seq_len;
    plan.param_count = table.total_numel();
    const DType grad_bf = cfg.runtime.grad_dtype == "fp32" ? DType::F32 : DType::BF16;

    for (const ParamInfo& p : table.params) {
        BufferSpec w;
        w.name = "weight." + p.name;
        w.kind = BufferKind::WEIGHT;
        w.dtype = p.dtype;
        w.shape = p.shape;
        w.param = int(p.index);
        w.component = "weights";
        plan.buffers.push_back(w);
        plan.weights_bytes += w.bytes();
    }
    for (const ParamInfo& p : table.params) {
        BufferSpec g;
        g.name = "grad." + p.name;
        g.kind = BufferKind::GRAD;
        g.dtype = p.dtype == DType::BF16 ? grad_bf : DType::F32;
        g.shape = p.shape;
        g.param = int(p.index);
        g.component = "gradients";
        plan.buffers.push_back(g);
        plan.grads_bytes += g.bytes();
    }

    std::vector<BufferSpec> state = optimizer_state_buffers(opt, table);
    std::vector<std::string> order;
    std::map<std::string, PlanComponent> comps;
    std::map<std::string, std::vector<int>> comp_params;
    for (const BufferSpec& b : state) {
        plan.state_bytes += b.bytes();
        auto [it, inserted] = comps.try_emplace(b.component);
        if (inserted) {
            order.push_back(b.component);
            it->second.name = b.component;
            it->second.state_kept = state_kept(b.state);
        }
        it->second.bytes += b.bytes();
        auto& ps = comp_params[b.component];
        if (std::find(ps.begin(), ps.end(), b.param) == ps.end()) {
            ps.push_back(b.param);
            it->second.params += table.params[size_t(b.param)].numel();
        }
        plan.buffers.push_back(b);
    }
    // Rows in tier order (backbone, experts, router), as paper Appendix B lists them.
    std::map<std::string, int> comp_tier;
    for (const BufferSpec& b : state) comp_tier.try_emplace(b.component, int(table.params[size_t(b.param)].tier));
    std::stable_sort(order.begin(), order.end(), [&](const std::string& a, const std::string& b) { return comp_tier[a] < comp_tier[b]; });
    for (const auto& n : order) plan.state_components.push_back(comps[n]);
    plan.paper_state_bytes = paper_state_bytes(opt, table);

    std::vector<BufferSpec> acts = activation_buffers(cfg, microbatch);
    // Optimizer scratch for one matrix at a time (fp32). Muon's Newton-Schulz holds X, X X^T, its
    // square and B X (<= 4 matrices of the largest Muon-routed shape); GaLore a projected gradient
    // and its back-projection (2 matrices); the element-wise optimizers compute the update RMS in a
    // second pass instead of storing U, so they need only per-matrix reduction scratch.
    const bool muon = opt.type == "muon" || opt.type == "muon-kj";
    const bool galore = opt.type == "galore" || opt.type == "galore-paper";
    int64_t max_matrix = 0, max_rows_cols = 0;
    for (const ParamInfo& p : table.params) {
        if (p.is_vector() || (muon && muon_uses_adam(p))) continue;
        max_matrix = std::max(max_matrix, p.rows() * p.cols());
        max_rows_cols = std::max(max_rows_cols, p.n_matrices() * (p.rows() + p.cols()));
    }
    BufferSpec ws;
    ws.name = "ws.optimizer";
    ws.kind = BufferKind::WORKSPACE;
    ws.dtype = DType::F32;
    ws.shape = {muon ? 4 * max_matrix : galore ? 2 * max_matrix : std::max<int64_t>(max_rows_cols, 1024)};
    const bool cuda = plan_backend(cfg) == "cuda";
    if (cuda) ws.shape[0] = std::max(ws.shape[0], (cuda_optimizer_scratch_bytes(opt, table, state) + 3) / 4);
    ws.first = ws.last = Phase::OPTIMIZER;
    ws.component = "workspace";
    acts.push_back(ws);
    if (cuda)
        for (BufferSpec& b : cuda_workspace_buffers(cfg, table, microbatch)) acts.push_back(std::move(b));
    for (BufferSpec& b : acts) {
        if (b.name == "ws.library" || b.name.rfind("ws.cuda_", 0) == 0) plan.workspace_bytes += b.bytes();
        plan.buffers.push_back(std::move(b));
    }

    // Sizes are 64-bit; a config at the schema's limits could still overflow them. Check in double.
    double total = 0;
    for (const BufferSpec& b : plan.buffers) {
        double bytes = double(dtype_bytes(b.dtype));
        for (int64_t d : b.shape) bytes *= double(d);
        total += bytes;
        if (bytes > 4e18 || total > 4e18)
            fail("plan: buffer '{}' alone or the plan in total exceeds 4 EiB ({:.3g} bytes); the config is too large for "
                 "any device", b.name, std::max(bytes, total));
    }
    plan.offsets = layout_arena(plan.buffers, &plan.peak_bytes);
    int64_t persistent_end = 0;
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
        const BufferSpec& b = plan.buffers[i];
        if (b.kind == BufferKind::WEIGHT || b.kind == BufferKind::GRAD || b.kind == BufferKind::STATE)
            persistent_end = std::max(persistent_end, plan.offsets[i] + b.bytes());
    }
    plan.activation_bytes = plan.peak_bytes - persistent_end - plan.workspace_bytes;
    return plan;
}

int64_t largest_fitting_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t budget_bytes) {
    int64_t best = 0;
    for (int64_t mb = 1; mb <= cfg.train.batch_size; ++mb) {
        if (cfg.train.batch_size % mb != 0) continue;
        MemoryPlan p = build_memory_plan(cfg, table, opt, mb);
        if (p.peak_bytes <= budget_bytes) best = mb;
        else break;  // the peak grows with the microbatch
    }
    return best;
}

}  // namespace skew
