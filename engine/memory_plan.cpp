// The memory plan's arithmetic (paper Eq. 2, Appendix B): the buffers each owner declares (weights
// and gradients here, state by optim/, activations by model/, workspace by each backend; summed by
// plan/plan.cpp) laid out by the arena's algorithm, so that the plan's peak is exactly the arena a
// run allocates.
#include "engine/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

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

int find_param_buffer(const std::vector<BufferSpec>& buffers, BufferKind kind, int64_t param, StateKind state) {
    for (size_t i = 0; i < buffers.size(); ++i) {
        const BufferSpec& b = buffers[i];
        if (b.kind == kind && b.param == param && (kind != BufferKind::STATE || b.state == state)) return int(i);
    }
    return -1;
}

}  // namespace

namespace {
constexpr std::string_view WEIGHT_PREFIX = "weight.";
}

std::string weight_buffer_name(const std::string& param) { return std::string(WEIGHT_PREFIX) + param; }
std::string grad_buffer_name(const std::string& param) { return "grad." + param; }
std::string state_buffer_name(const std::string& param, StateKind kind) {
    return fmt::format("state.{}.{}", param, kind);
}
std::string param_of_weight_buffer(const std::string& buffer_name) {
    return buffer_name.rfind(WEIGHT_PREFIX, 0) == 0 ? buffer_name.substr(WEIGHT_PREFIX.size()) : buffer_name;
}

int MemoryPlan::weight_of(int64_t param) const {
    return find_param_buffer(buffers, BufferKind::WEIGHT, param, StateKind::MOMENTUM);
}

int MemoryPlan::grad_of(int64_t param) const {
    return find_param_buffer(buffers, BufferKind::GRAD, param, StateKind::MOMENTUM);
}

int MemoryPlan::state_of(int64_t param, StateKind kind) const {
    return find_param_buffer(buffers, BufferKind::STATE, param, kind);
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

std::vector<BufferSpec> parameter_buffers(const ParamTable& table, DType grad_dtype) {
    std::vector<BufferSpec> out;
    for (const ParamInfo& p : table.params) {
        BufferSpec w;
        w.name = weight_buffer_name(p.name);
        w.kind = BufferKind::WEIGHT;
        w.dtype = p.dtype;
        w.shape = p.shape;
        w.param = int(p.index);
        w.component = "weights";
        out.push_back(w);
    }
    for (const ParamInfo& p : table.params) {
        BufferSpec g;
        g.name = grad_buffer_name(p.name);
        g.kind = BufferKind::GRAD;
        g.dtype = p.dtype == DType::BF16 ? grad_dtype : DType::F32;
        g.shape = p.shape;
        g.param = int(p.index);
        g.component = "gradients";
        out.push_back(g);
    }
    return out;
}

MemoryPlan lay_out_memory_plan(const std::string& optimizer, int64_t microbatch, int64_t seq_len,
                               const ParamTable& table, std::vector<BufferSpec> buffers, int64_t paper_state_bytes) {
    MemoryPlan plan;
    plan.optimizer = optimizer;
    plan.microbatch = microbatch;
    plan.seq_len = seq_len;
    plan.param_count = table.total_numel();
    plan.paper_state_bytes = paper_state_bytes;

    std::vector<std::string> order;
    std::map<std::string, PlanComponent> comps;
    std::map<std::string, std::set<int>> comp_params;  // a set: a component may cover thousands of parameters
    std::map<std::string, int> comp_tier;
    for (const BufferSpec& b : buffers) {
        switch (b.kind) {
            case BufferKind::WEIGHT: plan.weights_bytes += b.bytes(); break;
            case BufferKind::GRAD: plan.grads_bytes += b.bytes(); break;
            case BufferKind::STATE: {
                plan.state_bytes += b.bytes();
                auto [it, inserted] = comps.try_emplace(b.component);
                if (inserted) {
                    order.push_back(b.component);
                    it->second.name = b.component;
                    it->second.state_kept = state_kept(b.state);
                    comp_tier[b.component] = int(table.params[size_t(b.param)].tier);
                }
                it->second.bytes += b.bytes();
                if (comp_params[b.component].insert(b.param).second)
                    it->second.params += table.params[size_t(b.param)].numel();
                break;
            }
            case BufferKind::WORKSPACE:
                if (b.name == ws_buffer::LIBRARY || b.name == ws_buffer::CUDA_SCRATCH ||
                    b.name == ws_buffer::CUDA_WIDEN)
                    plan.workspace_bytes += b.bytes();
                break;
            case BufferKind::ACTIVATION: break;
        }
    }
    // Rows in tier order (backbone, experts, router), as paper Appendix B lists them; the shared
    // experts (model.n_shared_experts) between the backbone and the routed experts.
    auto row_order = [&](const std::string& c) {
        const Tier t = Tier(comp_tier[c]);
        return t == Tier::BACKBONE ? 0 : t == Tier::SHARED_EXPERTS ? 1 : t == Tier::EXPERTS ? 2 : 3;
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](const std::string& a, const std::string& b) { return row_order(a) < row_order(b); });
    for (const auto& n : order) plan.state_components.push_back(comps[n]);
    plan.buffers = std::move(buffers);

    // Sizes are 64-bit; a config at the schema's limits could still overflow them. Check in double.
    double total = 0;
    for (const BufferSpec& b : plan.buffers) {
        double bytes = double(dtype_bytes(b.dtype));
        for (int64_t d : b.shape) bytes *= double(d);
        total += bytes;
        if (bytes > 4e18 || total > 4e18)
            fail(
                "plan: buffer '{}' alone or the plan in total exceeds 4 EiB ({:.3g} bytes); the config is too large "
                "for "
                "any device",
                b.name, std::max(bytes, total));
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

}  // namespace skew
