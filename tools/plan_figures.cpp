// `skew plan`'s numbers (tools/plan_figures.h): the plans it prints, built once.
#include "tools/plan_figures.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/error.h"
#include "hf/config_map.h"
#include "optim/zero_partition.h"
#include "plan/plan.h"

namespace skew::tools {
namespace {

// The optimizer to plan: --optimizer, else the first of train.optimizers.
OptimizerConfig pick_optimizer(const Config& cfg, const std::string& name) {
    if (name.empty()) return cfg.optimizers.front();
    if (const OptimizerConfig* o = cfg.find_optimizer(name)) return *o;
    return builtin_optimizer(name);  // throws with the list of built-ins
}

}  // namespace

PlanFigures plan_figures(const PlanArgs& a) {
    PlanFigures f;
    f.cfg = a.hf.empty() ? load_config(a.config, a.overrides) : hf::config_from_hf_path(a.hf, a.overrides);
    Config& cfg = f.cfg;
    f.source = a.hf.empty() ? a.config : a.hf;
    if (a.expert_parallel > 0) {
        if (cfg.model.n_experts % a.expert_parallel != 0)
            fail("--expert-parallel {} must divide model.n_experts ({})", a.expert_parallel, cfg.model.n_experts);
        cfg.parallel.expert = a.expert_parallel;
    }
    f.distributed = a.world_size > 1 || cfg.parallel.expert > 1;
    if (f.distributed && cfg.train.expert_grads == ExpertGrads::DEFERRED)
        cfg.train.expert_grads = ExpertGrads::STORED;  // one process only
    f.layout = parallel_layout(cfg, a.world_size, 0);
    const ParallelLayout& layout = f.layout;
    f.table = build_param_table(cfg.model);
    const ParamTable& table = f.table;
    f.opt = pick_optimizer(cfg, a.optimizer);
    const OptimizerConfig& opt = f.opt;
    if (a.budget_given) f.budget = parse_size(a.budget, "--budget");  // '' is refused there, not read as "no budget"
    // A budget is the device's memory: on CUDA the context and libraries take their share first
    // (cuda_runtime_overhead_bytes), the arena gets the rest.
    f.cuda = plan_backend(cfg) == BackendChoice::CUDA;
    f.cuda_major = cuda_plan_major_version();
    f.overhead = f.cuda ? cuda_runtime_overhead_bytes(f.cuda_major) : 0;
    f.arena_budget = f.budget ? f.budget->bytes - f.overhead : 0;
    f.largest = f.budget ? largest_fitting_microbatch(cfg, table, opt, f.arena_budget, layout) : -1;
    // train.microbatch 0 means "the largest that fits": the budget's, else the rank's whole share.
    f.rank_batch = cfg.train.batch_size / layout.world_size;
    f.mb = a.microbatch > 0           ? a.microbatch
           : cfg.train.microbatch > 0 ? cfg.train.microbatch
           : f.largest > 0            ? f.largest
                                      : f.rank_batch;
    const int64_t mb = f.mb;
    if (f.rank_batch % mb != 0) {
        if (layout.world_size == 1) fail("--microbatch {} must divide train.batch_size ({})", mb, cfg.train.batch_size);
        fail("--microbatch {} must divide each rank's {} sequences (train.batch_size {} over {} ranks)", mb,
             f.rank_batch, cfg.train.batch_size, layout.world_size);
    }
    const ZeroPartition part = zero_partition(table, opt, layout);
    f.plan_rank = layout.zero() ? part.largest_rank() : 0;
    f.plan = build_largest_rank_plan(cfg, table, opt, mb, layout);
    if (a.microbatch == 0 && cfg.train.microbatch == 0)
        f.mb_note = f.largest > 0
                        ? fmt::format(
                              "train.microbatch 0: planned at {}, the largest that fits --budget; `skew train` "
                              "takes the largest that fits the device",
                              mb)
                        : fmt::format(
                              "train.microbatch 0: planned at the whole batch ({}){}; `skew train` takes the "
                              "largest that fits the device",
                              mb, f.budget ? " since no microbatch fits --budget" : " (no --budget given)");

    f.backbone = table.tier_numel(Tier::BACKBONE);
    f.experts = table.tier_numel(Tier::EXPERTS);
    f.router = table.tier_numel(Tier::ROUTER);
    f.total = table.total_numel();
    f.shared_experts = table.tier_numel(Tier::SHARED_EXPERTS);  // 0 without model.n_shared_experts
    f.active = table.active_numel(cfg.model.top_k, cfg.model.n_experts);

    // Every optimizer's state and peak at the same microbatch (paper Tables 1 and 3).
    for (const auto& n : builtin_optimizer_names()) {
        const OptimizerConfig* o = cfg.find_optimizer(n);
        f.all.push_back(o ? *o : builtin_optimizer(n));
    }
    for (const auto& o : cfg.defined_optimizers)
        if (std::find(builtin_optimizer_names().begin(), builtin_optimizer_names().end(), o.name) ==
            builtin_optimizer_names().end())
            f.all.push_back(o);
    for (const auto& o : f.all) f.plans.push_back(build_largest_rank_plan(cfg, table, o, mb, layout));
    // both modes of train.expert_grads side by side (docs/design.md "Deferred expert gradients")
    for (const ExpertGrads mode : {ExpertGrads::STORED, ExpertGrads::DEFERRED}) {
        if (f.distributed && mode == ExpertGrads::DEFERRED) continue;  // one process only
        Config mc = cfg;
        mc.train.expert_grads = mode;
        PlanModeRow r{std::string(choice_name(mode)), build_largest_rank_plan(mc, table, opt, mb, layout)};
        if (f.budget) r.largest = largest_fitting_microbatch(mc, table, opt, f.arena_budget, layout);
        f.expert_grad_modes.push_back(std::move(r));
    }
    // every rank's optimizer state (the other parts are the same on every rank)
    if (f.distributed) {
        for (int64_t r = 0; r < layout.world_size; ++r) {
            ParallelLayout lr = layout;
            lr.rank = r;
            const MemoryPlan pr = build_memory_plan(cfg, table, opt, mb, lr);
            f.ranks.push_back({r, pr.state_bytes, int64_t(part.owned[size_t(r)].size())});
        }
    }
    // every mode of train.recompute side by side (docs/design.md "Activation recompute")
    for (const Recompute mode : {Recompute::BLOCK, Recompute::ATTENTION, Recompute::NONE}) {
        Config mc = cfg;
        mc.train.recompute = mode;
        PlanModeRow r{std::string(choice_name(mode)), build_largest_rank_plan(mc, table, opt, mb, layout)};
        if (f.budget) r.largest = largest_fitting_microbatch(mc, table, opt, f.arena_budget, layout);
        f.recompute_modes.push_back(std::move(r));
    }
    return f;
}

}  // namespace skew::tools
