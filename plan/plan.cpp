// The plan assembler: sums the declarations of the parameter table, the optimizer, the model and
// the backend into one MemoryPlan (plan/plan.h); one source per size, nothing re-derived here.
#include "plan/plan.h"

#include <algorithm>

#include "engine/error.h"
#include "model/activations.h"
#include "optim/zero_partition.h"
#include "plan/backend_workspace.h"

namespace skew {

MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, int64_t microbatch,
                             const ParallelLayout& layout) {
    if (microbatch < 1) fail("plan: microbatch must be >= 1 (got {})", microbatch);
    if (layout.world_size < 1 || layout.rank < 0 || layout.rank >= layout.world_size || layout.expert_parallel < 1 ||
        layout.world_size % layout.expert_parallel != 0)
        fail("plan: bad layout ({}, rank {})", layout.describe(), layout.rank);
    if (cfg.train.batch_size % layout.world_size != 0)
        fail("plan: train.batch_size {} is not a multiple of the world size {}", cfg.train.batch_size,
             layout.world_size);
    const int64_t rank_batch = cfg.train.batch_size / layout.world_size;  // sequences per rank per step
    if (rank_batch % microbatch != 0) {
        if (layout.world_size == 1)
            fail("plan: microbatch {} does not divide train.batch_size {}", microbatch, cfg.train.batch_size);
        fail("plan: microbatch {} does not divide the rank's {} sequences (train.batch_size {} over {} ranks)",
             microbatch, rank_batch, cfg.train.batch_size, layout.world_size);
    }
    // what this rank holds (weights, gradients) and owns (optimizer state and its update): the
    // whole model's table is cut to the rank's banks here; a rank's table (build_param_table with
    // an ExpertShard, its banks already n_experts / M) is taken as it is, never cut twice
    const int64_t table_m = table_expert_parallel(table, cfg.model);
    if (table_m > 1 && layout.expert_parallel != 1 && layout.expert_parallel != table_m)
        fail("plan: the parameter table holds 1/{} of each expert bank, the layout has expert parallel {}", table_m,
             layout.expert_parallel);
    if (table_m > 1 && layout.zero())
        fail("plan: ZeRO-1 partitions the whole model's table (build_param_table(cfg.model)), not a rank's ({})",
             layout.describe());
    const ParamTable held = table_m > 1 ? table : held_param_table(table, layout);
    const ParamTable owned =
        layout.zero() ? owned_param_table(table, zero_partition(table, opt, layout), layout.rank) : held;
    const DType grad_dtype = cfg.runtime.grad_dtype == GradDtype::FP32 ? DType::F32 : DType::BF16;
    const BackendWorkspace backend = backend_workspace(cfg, table, microbatch);
    // expert parallel: the exchange slots of M ranks, from the rank's table (its banks hold E/M
    // experts) or the config when given the whole model's table
    const int64_t expert_parallel = std::max<int64_t>(table_expert_parallel(table, cfg.model), cfg.parallel.expert);
    const ActDims dims = act_dims(cfg.model, microbatch, cfg.train.seq_len, backend.lm_head_bytes, expert_parallel);

    std::vector<BufferSpec> buffers = parameter_buffers(held, grad_dtype);
    auto append = [&](std::vector<BufferSpec> more) {
        for (BufferSpec& b : more) buffers.push_back(std::move(b));
    };
    // deferred expert gradients: the expert banks' gradient buffers give way to the kept operands
    // of their weight-gradient products and one expert matrix of scratch (model/activations.h)
    const bool deferred = cfg.train.expert_grads == ExpertGrads::DEFERRED;
    if (deferred) {
        std::erase_if(buffers, [&](const BufferSpec& b) {
            return b.kind == BufferKind::GRAD && is_expert_bank(held.params[size_t(b.param)]);
        });
        append(deferred_expert_buffers(cfg, dims, rank_batch / microbatch, grad_dtype));
    }
    append(optimizer_state_buffers(opt, owned));
    append(model_activation_buffers(cfg, dims));
    append(backend.whole_step);
    buffers.push_back(optimizer_scratch_buffer(opt, owned, plan_backend(cfg)));
    append(backend.ops);
    // the Appendix B rows count the parameters whose state this rank keeps: its owned parts
    ParamTable by_index = held;
    for (const ParamInfo& p : owned.params) by_index.params[p.index] = p;
    MemoryPlan plan = lay_out_memory_plan(opt.name, microbatch, cfg.train.seq_len, by_index, std::move(buffers),
                                          paper_state_bytes(opt, owned));
    plan.param_count = held.total_numel();
    return plan;
}

MemoryPlan build_largest_rank_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t microbatch, const ParallelLayout& layout) {
    ParallelLayout l = layout;
    l.rank = l.zero() ? zero_partition(table, opt, l).largest_rank() : 0;
    return build_memory_plan(cfg, table, opt, microbatch, l);
}

int64_t largest_fitting_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t budget_bytes, const ParallelLayout& layout) {
    int64_t best = 0;
    const int64_t rank_batch = cfg.train.batch_size / std::max<int64_t>(1, layout.world_size);
    for (int64_t mb = 1; mb <= rank_batch; ++mb) {
        if (rank_batch % mb != 0) continue;
        MemoryPlan p = build_largest_rank_plan(cfg, table, opt, mb, layout);
        if (p.peak_bytes <= budget_bytes) best = mb;
        else break;  // the peak grows with the microbatch
    }
    return best;
}

}  // namespace skew
