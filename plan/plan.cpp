// The plan assembler: sums the declarations of the parameter table, the optimizer, the model and
// the backend into one MemoryPlan (plan/plan.h); one source per size, nothing re-derived here.
#include "plan/plan.h"

#include <algorithm>

#include "engine/error.h"
#include "model/activations.h"

namespace skew {

MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                             int64_t microbatch) {
    if (microbatch < 1) fail("plan: microbatch must be >= 1 (got {})", microbatch);
    if (cfg.train.batch_size % microbatch != 0)
        fail("plan: microbatch {} does not divide train.batch_size {}", microbatch, cfg.train.batch_size);
    const DType grad_dtype = cfg.runtime.grad_dtype == "fp32" ? DType::F32 : DType::BF16;
    const BackendWorkspace backend = backend_workspace(cfg, table, microbatch);
    // expert parallel: the exchange slots of M ranks, from the rank's table (its banks hold E/M
    // experts) or the config when given the whole model's table
    const int64_t expert_parallel = std::max<int64_t>(table_expert_parallel(table, cfg.model), cfg.parallel.expert);
    const ActDims dims = act_dims(cfg.model, microbatch, cfg.train.seq_len, backend.lm_head_bytes, expert_parallel);

    std::vector<BufferSpec> buffers = parameter_buffers(table, grad_dtype);
    auto append = [&](std::vector<BufferSpec> more) {
        for (BufferSpec& b : more) buffers.push_back(std::move(b));
    };
    // deferred expert gradients: the expert banks' gradient buffers give way to the kept operands
    // of their weight-gradient products and one expert matrix of scratch (model/activations.h)
    const bool deferred = cfg.train.expert_grads == "deferred";
    if (deferred) {
        std::erase_if(buffers, [&](const BufferSpec& b) {
            return b.kind == BufferKind::GRAD && deferred_expert_param(table.params[size_t(b.param)]);
        });
        append(deferred_expert_buffers(cfg, dims, cfg.train.batch_size / microbatch, grad_dtype));
    }
    append(optimizer_state_buffers(opt, table));
    append(model_activation_buffers(cfg, dims));
    append(backend.whole_step);
    buffers.push_back(optimizer_scratch_buffer(opt, table, plan_backend(cfg)));
    append(backend.ops);
    return lay_out_memory_plan(opt.name, microbatch, cfg.train.seq_len, table, std::move(buffers),
                               paper_state_bytes(opt, table));
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
