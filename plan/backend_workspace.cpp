// Each backend's own memory in the plan, summed from the scratch formulas beside its kernels: the
// CUDA backend's op scratch (sorts, reduction partials), the fp32 widening buffer of mixed-dtype
// products (the fp32 router) and its fused LM head's workspace (kernels/cuda/workspace_sizes.h), so
// a CUDA run allocates nothing outside the arena (docs/design.md, "One memory plan"); the CPU
// backend's fused LM head (kernels/cpu/workspace_sizes.h); the cuBLASLt workspace of
// runtime.workspace_gib.
#include "plan/backend_workspace.h"

#include <algorithm>

#include "kernels/cpu/workspace_sizes.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew {

namespace {

/// ws.library: the cuBLASLt workspace of runtime.workspace_gib (bf16 words), none when 0.
std::vector<BufferSpec> library_workspace(const Config& cfg) {
    std::vector<BufferSpec> out;
    if (cfg.runtime.workspace_gib <= 0) return out;
    BufferSpec b;
    b.name = ws_buffer::LIBRARY;
    b.kind = BufferKind::WORKSPACE;
    b.dtype = DType::U16;
    b.shape = {int64_t(cfg.runtime.workspace_gib * GIB / 2.0)};
    b.first = Phase::FORWARD;
    b.last = Phase::OPTIMIZER;
    b.component = "workspace";
    out.push_back(std::move(b));
    return out;
}

}  // namespace

BackendWorkspace backend_workspace(const Config& cfg, const ParamTable& table, int64_t microbatch) {
    return plan_backend(cfg) == BackendChoice::CPU ? cpu_backend_workspace(cfg, table, microbatch)
                                                   : cuda_backend_workspace(cfg, table, microbatch);
}

BackendWorkspace cpu_backend_workspace(const Config& cfg, const ParamTable&, int64_t microbatch) {
    const ModelConfig& m = cfg.model;
    const int64_t N = microbatch * cfg.train.seq_len, Vp = m.padded_vocab_size;
    BackendWorkspace ws;
    ws.whole_step = library_workspace(cfg);
    ws.lm_head_bytes = cpu_ws::lm_head_workspace_bytes(N, m.d_model, Vp);
    return ws;
}

BackendWorkspace cuda_backend_workspace(const Config& cfg, const ParamTable& table, int64_t microbatch) {
    const ModelConfig& m = cfg.model;
    const int64_t B = microbatch, T = cfg.train.seq_len, N = B * T, d = m.d_model;
    const bool has_moe = !m.moe_blocks.empty();
    int64_t grad_blocks = 0;
    for (const ParamInfo& p : table.params) grad_blocks += cuda_ws::sum_squares_blocks(p.numel());
    int64_t scratch = cuda_ws::embedding_backward_scratch_bytes(B, T, m.padded_vocab_size);
    scratch = std::max(scratch, cuda_ws::layernorm_backward_scratch_bytes(N, d));
    scratch = std::max(scratch, cuda_ws::attention_backward_scratch_bytes(B, m.n_heads, T));
    // q and k's RMSNorm (model.qk_norm) and the projections' biases (model.attention_bias): the
    // weight gradients' row-chunk partials over q's width, the widest of q, k and v
    const int64_t qd = m.n_heads * m.head_dim();
    if (m.qk_norm == QkNorm::FULL) scratch = std::max(scratch, cuda_ws::rmsnorm_backward_scratch_bytes(N, qd));
    if (m.qk_norm == QkNorm::PER_HEAD)
        scratch = std::max(scratch, cuda_ws::rmsnorm_backward_scratch_bytes(N * m.n_heads, m.head_dim()));
    if (m.attention_bias) scratch = std::max(scratch, cuda_ws::bias_add_backward_scratch_bytes(N, qd));
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
    add(ws_buffer::CUDA_SCRATCH, DType::F32, (scratch + 3) / 4);  // bytes, held as fp32 words
    // The router multiplies bf16 activations (N, d) by fp32 weights: cuBLASLt has no bf16 x fp32
    // product, so the bf16 operand (forward: the LN output; backward: the LN output for the weight
    // gradient, the bf16 input gradient it accumulates into) is widened to fp32 once per product.
    if (has_moe) add(ws_buffer::CUDA_WIDEN, DType::F32, N * d + int64_t(m.n_experts) * d);
    BackendWorkspace ws;
    ws.whole_step = library_workspace(cfg);
    ws.ops = std::move(out);
    ws.lm_head_bytes = cuda_ws::lm_head_workspace_bytes(N, d, m.padded_vocab_size, true);  // bf16 x and wte
    return ws;
}

}  // namespace skew
