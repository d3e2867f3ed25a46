// The CUDA backend's own device memory in the plan: op scratch (sorts, reduction partials), the
// fp32 widening buffer of mixed-dtype products (the fp32 router), and the CUDA optimizer step's
// per-tensor scratch, sized from engine/cuda_workspace.h so a CUDA run allocates nothing outside
// the arena (issue 7: the measured peak within 1 GiB of the plan).
#include <algorithm>

#include "engine/cuda_workspace.h"
#include "engine/memory_plan.h"

namespace skew {

std::string plan_backend(const Config& cfg) { return cfg.runtime.backend == "cpu" ? "cpu" : "cuda"; }

std::vector<BufferSpec> cuda_workspace_buffers(const Config& cfg, const ParamTable& table, int64_t microbatch) {
    const ModelConfig& m = cfg.model;
    const int64_t B = microbatch, T = cfg.train.seq_len, N = B * T, d = m.d_model;
    const bool has_moe = !m.moe_blocks.empty();
    int64_t grad_blocks = 0;
    for (const ParamInfo& p : table.params) grad_blocks += cuda_ws::sum_squares_blocks(p.numel());
    int64_t scratch = cuda_ws::embedding_backward_scratch_bytes(B, T, m.padded_vocab_size);
    scratch = std::max(scratch, cuda_ws::layernorm_backward_scratch_bytes(N, d));
    scratch = std::max(scratch, cuda_ws::attention_backward_scratch_bytes(B, m.n_heads, T));
    scratch = std::max(scratch, cuda_ws::sum_squares_scratch_bytes(int64_t(table.params.size()), grad_blocks));
    if (has_moe) {
        scratch = std::max(scratch, cuda_ws::moe_router_forward_scratch_bytes(N, m.n_experts));
        scratch = std::max(scratch, cuda_ws::moe_dispatch_scratch_bytes(N, m.top_k, m.n_experts));
        scratch = std::max(scratch, cuda_ws::moe_matmul_scratch_bytes(m.n_experts));
    }
    std::vector<BufferSpec> out;
    auto add = [&](const char* name, DType dt, int64_t n) {
        BufferSpec b;
        b.name = name;
        b.kind = BufferKind::WORKSPACE;
        b.dtype = dt;
        b.shape = {n};
        b.first = Phase::FORWARD;
        b.last = Phase::BACKWARD;  // the grad-norm runs at the end of backward
        b.component = "workspace";
        out.push_back(std::move(b));
    };
    add("ws.cuda_scratch", DType::F32, (scratch + 3) / 4);  // bytes, held as fp32 words
    // The router multiplies bf16 activations (N, d) by fp32 weights: cuBLASLt has no bf16 x fp32
    // product, so the bf16 operand (forward: the LN output; backward: the LN output for the weight
    // gradient, the bf16 input gradient it accumulates into) is widened to fp32 once per product.
    if (has_moe) add("ws.cuda_widen", DType::F32, N * d + int64_t(m.n_experts) * d);
    return out;
}

int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table,
                                     const std::vector<BufferSpec>& state) {
    const bool muon = opt.type == "muon" || opt.type == "muon-kj";
    const bool fused = opt.type == "skewadam" || opt.type == "adafactor";
    const bool galore = opt.type == "galore" || opt.type == "galore-paper";
    if (!muon && !fused && !galore) return 0;
    std::vector<bool> factored(table.params.size(), false), projected(table.params.size(), false);
    for (const BufferSpec& b : state) {
        if (b.state == StateKind::SECOND_ROW && b.param >= 0) factored[size_t(b.param)] = true;
        if (b.state == StateKind::GALORE_P && b.param >= 0) projected[size_t(b.param)] = true;
    }
    int64_t need = 0;
    for (size_t i = 0; i < table.params.size(); ++i) {
        const ParamInfo& p = table.params[i];
        if (galore) {
            if (projected[i])
                need = std::max(need, cuda_ws::galore_scratch_bytes(p.n_matrices(), p.rows(), p.cols(),
                                                                    std::min({opt.rank, p.rows(), p.cols()}),
                                                                    opt.type == "galore-paper"));
            continue;
        }
        if (muon) {
            if (!p.is_vector() && !muon_uses_adam(p)) need = std::max(need, cuda_ws::muon_scratch_bytes(p.n_matrices(), p.rows(), p.cols()));
            continue;
        }
        // A factored second moment runs per matrix; every other tensor as one 1 x numel matrix.
        need = std::max(need, factored[i] ? cuda_ws::optim_update_scratch_bytes(p.n_matrices(), p.rows(), p.cols())
                                          : cuda_ws::optim_update_scratch_bytes(1, 1, p.numel()));
    }
    return need;
}

int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table) {
    return cuda_optimizer_scratch_bytes(opt, table, optimizer_state_buffers(opt, table));
}

}  // namespace skew
