// What each backend declares to the memory plan (plan/plan.cpp sums it with the table's, the
// optimizer's and the model's declarations): the sums of its ops' scratch formulas, which sit beside
// the kernels that lay their scratch out by them (kernels/cpu/workspace_sizes.h,
// kernels/cuda/workspace_sizes.h). Device-free: `skew plan` sizes a CUDA run on any machine.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"

namespace skew {

/// What a backend declares to the plan for one microbatch, from its device-free size model:
/// buffers it holds for the whole step (the cuBLASLt workspace ws.library, runtime.workspace_gib),
/// its op scratch for forward and backward, and the bytes its fused LM head + cross-entropy needs
/// (the model's act.logits slot is at least that large).
struct BackendWorkspace {
    std::vector<BufferSpec> whole_step;  // FORWARD..OPTIMIZER
    std::vector<BufferSpec> ops;         // FORWARD..BACKWARD
    int64_t lm_head_bytes = 0;
};

/// The workspace of plan_backend(cfg) for `microbatch` sequences: cpu_backend_workspace or
/// cuda_backend_workspace.
BackendWorkspace backend_workspace(const Config& cfg, const ParamTable& table, int64_t microbatch);

/// The CPU backend's: its fused LM head's workspace (kernels/cpu/workspace_sizes.h: a chunk of at most
/// 512 tokens of fp32 logits, the embedding widened to fp32 and an fp32 accumulator for its
/// gradient, per-group input-gradient partials and softmax statistics; kernels/cpu/lm_head.cpp);
/// no op scratch.
BackendWorkspace cpu_backend_workspace(const Config& cfg, const ParamTable& table, int64_t microbatch);

/// The CUDA backend's (formulas: kernels/cuda/workspace_sizes.h): ws.cuda_scratch (fp32 words holding the
/// largest op scratch: embedding/LayerNorm/attention backward, router, dispatch sort, grad-norm
/// partials), with MoE blocks ws.cuda_widen (fp32, the router's bf16 operands widened), and the
/// fused LM head's chunk logits, dlogits, losses and dwte accumulator.
BackendWorkspace cuda_backend_workspace(const Config& cfg, const ParamTable& table, int64_t microbatch);

}  // namespace skew
