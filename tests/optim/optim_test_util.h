// Helpers for the optimizer tests: hand-built parameters (no model needed), their weights,
// gradients and host optimizer state.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/common/bf16.h"
#include "optim/optimizer.h"

namespace skew::test {

inline ParamInfo make_param(const std::string& name, std::vector<int64_t> shape, DType dtype, Tier tier, Role role,
                            uint32_t index) {
    ParamInfo p;
    p.name = name;
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.tier = tier;
    p.role = role;
    p.index = index;
    return p;
}

/// Weights (bf16 or fp32 storage, kept as raw words), fp32 gradients and slots for a list of params.
struct TensorSet {
    std::deque<ParamInfo> infos;
    std::vector<std::vector<uint16_t>> w16;
    std::vector<std::vector<float>> w32;
    std::vector<std::vector<float>> grads;
    std::vector<ParamSlot> slots;
    HostOptimState state;

    void add(const ParamInfo& p) {
        infos.push_back(p);
        w16.emplace_back(p.dtype == DType::BF16 ? size_t(p.numel()) : 0, 0);
        w32.emplace_back(p.dtype == DType::F32 ? size_t(p.numel()) : 0, 0.0f);
        grads.emplace_back(size_t(p.numel()), 0.0f);
    }
    /// Bind slots (call after all add()s and before stepping).
    void bind(const OptimizerConfig& opt) {
        slots.clear();
        for (size_t i = 0; i < infos.size(); ++i) {
            ParamSlot s;
            s.info = &infos[i];
            s.weight =
                infos[i].dtype == DType::BF16 ? static_cast<void*>(w16[i].data()) : static_cast<void*>(w32[i].data());
            s.grad = grads[i].data();
            s.grad_dtype = DType::F32;
            slots.push_back(s);
        }
        allocate_host_state(opt, slots, state);
    }
    float weight(size_t t, int64_t i) const {
        return infos[t].dtype == DType::BF16 ? bf16_to_f32(bf16{w16[t][size_t(i)]}) : w32[t][size_t(i)];
    }
    void set_weight(size_t t, int64_t i, float x) {
        if (infos[t].dtype == DType::BF16) w16[t][size_t(i)] = f32_to_bf16(x).bits;
        else w32[t][size_t(i)] = x;
    }
};

}  // namespace skew::test
