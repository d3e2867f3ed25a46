// The numbers `skew plan` prints (tools/cmd_plan.cpp), computed once for its text and its --json:
// the planned rank's memory plan for the optimizer, every optimizer's, both train.expert_grads
// modes, every train.recompute mode, every rank's optimizer state, and what fits a budget.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "engine/sizes.h"

namespace skew::tools {

/// What `skew plan` was asked for (its flags).
struct PlanArgs {
    std::string config;
    std::string hf;  // --hf: a Hugging Face checkpoint folder or config.json instead of a config
    std::string optimizer;
    int64_t microbatch = 0;
    std::string budget;
    bool budget_given = false;  // --budget was on the command line (even as '')
    bool json = false;
    int64_t world_size = 1;
    int64_t expert_parallel = 0;  // 0: parallel.expert of the config
    std::vector<std::string> overrides;
};

/// One mode of a setting side by side (train.expert_grads or train.recompute): its plan and, with a
/// budget, the largest microbatch that fits (-1 without a budget, 0 when none fits).
struct PlanModeRow {
    std::string mode;
    MemoryPlan plan;
    int64_t largest = -1;
};

/// One rank's optimizer state (the other parts are the same on every rank).
struct PlanRankRow {
    int64_t rank, state_bytes, ranges;
};

/// Everything `skew plan` prints, in bytes and parameter counts.
struct PlanFigures {
    Config cfg;
    std::string source;  // the config file or --hf path
    ParallelLayout layout;
    bool distributed = false;  // more than one rank or expert parallelism
    ParamTable table;
    OptimizerConfig opt;
    std::optional<ParsedSize> budget;
    bool cuda = false;         // planned for the CUDA backend
    int cuda_major = 0;        // the CUDA version whose runtime overhead is modelled
    int64_t overhead = 0;      // CUDA context and libraries outside the arena (0 on the CPU)
    int64_t arena_budget = 0;  // the budget less the overhead
    int64_t largest = -1;      // largest microbatch that fits the budget (-1: no budget)
    int64_t rank_batch = 0;    // train.batch_size over the ranks
    int64_t mb = 0;            // the microbatch planned
    std::string mb_note;       // how train.microbatch 0 was resolved, when it was
    int64_t plan_rank = 0;     // the rank planned (the most optimizer state under ZeRO-1)
    MemoryPlan plan;           // that rank's plan for `opt`
    int64_t backbone = 0, experts = 0, router = 0, shared_experts = 0, total = 0, active = 0;  // parameters
    std::vector<OptimizerConfig> all;  // every built-in optimizer and the config's own
    std::vector<MemoryPlan> plans;     // their plans at `mb`
    std::vector<PlanModeRow> expert_grad_modes;
    std::vector<PlanRankRow> ranks;  // when distributed
    std::vector<PlanModeRow> recompute_modes;
};

/// The figures for `a`. Throws skew::Error naming the flag or config key: an unreadable config, an
/// --expert-parallel that does not divide model.n_experts, a microbatch that does not divide each
/// rank's sequences, a bad --budget.
PlanFigures plan_figures(const PlanArgs& a);

}  // namespace skew::tools
