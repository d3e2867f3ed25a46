// Deferred expert weight gradients: the per-expert optimizer step (train/deferred_experts.h).
#include "train/deferred_experts.h"

#include "engine/error.h"

namespace skew {

void step_deferred_experts(Model& m, const OptimizerConfig& opt, OptimizerRunner& runner, std::span<ParamSlot> slots,
                           const OptimStep& step) {
    if (!m.deferred.on) return;
    Backend& be = *m.backend;
    const ModelConfig& c = m.cfg->model;
    const int64_t d = c.d_model, de = c.d_expert, E = c.n_experts;
    for (size_t bi = 0; bi < m.blocks.size(); ++bi) {
        const BlockParams& bp = m.blocks[bi];
        if (!bp.moe) continue;
        const auto& kept = m.deferred.kept[bi];
        struct Bank {
            const ParamRef* param;
            bf16* KeptExpertOperands::*x;
            bf16* KeptExpertOperands::*dy;
            int64_t in, out;
        };
        const Bank banks[3] = {{&bp.expert_w1, &KeptExpertOperands::moe_in, &KeptExpertOperands::d_moe_h1, d, de},
                               {&bp.expert_w2, &KeptExpertOperands::moe_in, &KeptExpertOperands::d_moe_h2, d, de},
                               {&bp.expert_w3, &KeptExpertOperands::moe_act, &KeptExpertOperands::d_moe_out, de, d}};
        for (const Bank& bank : banks) {
            const ParamInfo& info = *bank.param->info;
            ParamSlot& whole = slots[info.index];
            if (whole.info != &info && whole.info->index != info.index)
                fail("deferred expert gradients: slot {} is not parameter '{}'", info.index, info.name);
            const int64_t per = bank.in * bank.out;
            if (info.n_matrices() != E || info.numel() != E * per)
                fail("deferred expert gradients: '{}' is not {} matrices of {} x {}", info.name, E, bank.out, bank.in);
            // per-matrix share of each state tensor (full-size or (n_matrices, ...) factored)
            std::array<int64_t, STATE_KIND_COUNT> state_per{};
            for (const StateSlotSpec& st : optimizer_param_state(opt, info)) {
                if (st.numel() % E != 0)
                    fail("deferred expert gradients: the {} state of '{}' ({} values) does not split into {} experts",
                         choice_name(st.kind), info.name, st.numel(), E);
                state_per[size_t(st.kind)] = st.numel() / E;
            }
            ParamInfo one = info;
            one.shape = {1, bank.out, bank.in};
            const int64_t wbytes = dtype_bytes(info.dtype);
            for (int64_t e = 0; e < E; ++e) {
                be.zero(m.deferred.scratch, per);
                for (const KeptExpertOperands& k : kept) {
                    if (k.offsets.empty()) continue;  // not run this step
                    const int64_t r0 = k.offsets[size_t(e)], rows = k.offsets[size_t(e + 1)] - r0;
                    if (rows == 0) continue;
                    // dW += dY_e^T X_e: the product (and accumulation order) of the stored mode's
                    // moe_matmul_backward for this expert (the CPU loop, the CUDA per-expert loop)
                    be.matmul(m.deferred.scratch, ConstTensorRef((k.*bank.dy) + r0 * bank.out),
                              ConstTensorRef((k.*bank.x) + r0 * bank.in),
                              MatmulShape{bank.out, bank.in, rows, true, false, 1.0f, 1.0f});
                }
                if (m.deferred.clip_coef != 1.0f) be.scale(m.deferred.scratch, m.deferred.clip_coef, per);
                ParamSlot s = whole;
                s.info = &one;
                s.weight = static_cast<char*>(whole.weight) + e * per * wbytes;
                s.grad = m.deferred.scratch.data;
                s.grad_dtype = m.deferred.scratch.type == ScalarType::BF16 ? DType::BF16 : DType::F32;
                s.element_base = whole.element_base + e * per;
                for (size_t kind = 0; kind < size_t(STATE_KIND_COUNT); ++kind)
                    if (whole.state[kind]) s.state[kind] = whole.state[kind] + e * state_per[kind];
                runner.step(std::span<ParamSlot>(&s, 1), step);
            }
        }
    }
}

}  // namespace skew
