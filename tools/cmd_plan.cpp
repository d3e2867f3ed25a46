// skew plan: the memory-budget dry run (no GPU needed). Prints the paper's Appendix B table for
// one optimizer, the memory at peak, whether it fits a budget and the largest microbatch that
// does, both train.expert_grads modes and every train.recompute mode, and every optimizer's state
// side by side; --json gives the same numbers for scripts. --world-size N [--expert-parallel M]
// plans one rank of a distributed run (docs/distributed.md): the rank with the most optimizer state
// under ZeRO-1, and every rank's state.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>
#include <optional>

#include "engine/config.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/param_table.h"
#include "engine/sizes.h"
#include "hf/config_map.h"
#include "optim/zero_partition.h"
#include "plan/plan.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"

namespace skew::tools {
namespace {

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

std::string with_commas(int64_t n) {
    std::string s = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i && (s.size() - i) % 3 == 0) out += ',';
        out += s[i];
    }
    return n < 0 ? "-" + out : out;
}

// Parameters in millions as the paper writes them: 341.4M, 6,442.5M, 0.52M.
std::string millions(int64_t n) {
    double m = double(n) / 1e6;
    if (m < 10) return fmt::format("{:.2f}M", m);
    int64_t tenths = int64_t(std::llround(m * 10));
    return fmt::format("{}.{}M", with_commas(tenths / 10), tenths % 10);
}

double gib(int64_t b) { return double(b) / GIB; }

// MiB with one decimal and thousands separators: 1,302.2
std::string mib_text(int64_t b) {
    int64_t tenths = int64_t(std::llround(double(b) / MIB * 10));
    return fmt::format("{}.{}", with_commas(tenths / 10), tenths % 10);
}
double mib(int64_t b) { return double(b) / MIB; }

// The optimizer to plan: --optimizer, else the first of train.optimizers.
OptimizerConfig pick_optimizer(const Config& cfg, const std::string& name) {
    if (name.empty()) return cfg.optimizers.front();
    if (const OptimizerConfig* o = cfg.find_optimizer(name)) return *o;
    return builtin_optimizer(name);  // throws with the list of built-ins
}

void run_plan(const PlanArgs& a) {
    Config cfg = a.hf.empty() ? load_config(a.config, a.overrides) : hf::config_from_hf_path(a.hf, a.overrides);
    const std::string source = a.hf.empty() ? a.config : a.hf;
    if (a.expert_parallel > 0) {
        if (cfg.model.n_experts % a.expert_parallel != 0)
            fail("--expert-parallel {} must divide model.n_experts ({})", a.expert_parallel, cfg.model.n_experts);
        cfg.parallel.expert = a.expert_parallel;
    }
    const bool distributed = a.world_size > 1 || cfg.parallel.expert > 1;
    if (distributed && cfg.train.expert_grads == ExpertGrads::DEFERRED)
        cfg.train.expert_grads = ExpertGrads::STORED;  // one process only
    const ParallelLayout layout = parallel_layout(cfg, a.world_size, 0);
    ParamTable table = build_param_table(cfg.model);
    OptimizerConfig opt = pick_optimizer(cfg, a.optimizer);
    std::optional<ParsedSize> budget;
    if (a.budget_given) budget = parse_size(a.budget, "--budget");  // '' is refused there, not read as "no budget"
    // A budget is the device's memory: on CUDA the context and libraries take their share first
    // (cuda_runtime_overhead_bytes), the arena gets the rest.
    const bool cuda = plan_backend(cfg) == BackendChoice::CUDA;
    const int cuda_major = cuda_plan_major_version();
    const int64_t overhead = cuda ? cuda_runtime_overhead_bytes(cuda_major) : 0;
    const int64_t arena_budget = budget ? budget->bytes - overhead : 0;
    int64_t largest = budget ? largest_fitting_microbatch(cfg, table, opt, arena_budget, layout) : -1;
    // train.microbatch 0 means "the largest that fits": the budget's, else the rank's whole share.
    const int64_t rank_batch = cfg.train.batch_size / layout.world_size;
    int64_t mb = a.microbatch > 0           ? a.microbatch
                 : cfg.train.microbatch > 0 ? cfg.train.microbatch
                 : largest > 0              ? largest
                                            : rank_batch;
    if (rank_batch % mb != 0) {
        if (layout.world_size == 1) fail("--microbatch {} must divide train.batch_size ({})", mb, cfg.train.batch_size);
        fail("--microbatch {} must divide each rank's {} sequences (train.batch_size {} over {} ranks)", mb, rank_batch,
             cfg.train.batch_size, layout.world_size);
    }
    const ZeroPartition part = zero_partition(table, opt, layout);
    const int64_t plan_rank = layout.zero() ? part.largest_rank() : 0;
    MemoryPlan plan = build_largest_rank_plan(cfg, table, opt, mb, layout);
    std::string mb_note;  // how train.microbatch 0 was resolved, when it was
    if (a.microbatch == 0 && cfg.train.microbatch == 0)
        mb_note = largest > 0 ? fmt::format(
                                    "train.microbatch 0: planned at {}, the largest that fits --budget; `skew train` "
                                    "takes the largest that fits the device",
                                    mb)
                              : fmt::format(
                                    "train.microbatch 0: planned at the whole batch ({}){}; `skew train` takes the "
                                    "largest that fits the device",
                                    mb, budget ? " since no microbatch fits --budget" : " (no --budget given)");

    const int64_t bb = table.tier_numel(Tier::BACKBONE), ex = table.tier_numel(Tier::EXPERTS),
                  rt = table.tier_numel(Tier::ROUTER), total = table.total_numel();
    const int64_t sh = table.tier_numel(Tier::SHARED_EXPERTS);  // 0 without model.n_shared_experts
    const int64_t active = table.active_numel(cfg.model.top_k, cfg.model.n_experts);

    // Every optimizer's state and peak at the same microbatch (paper Tables 1 and 3).
    std::vector<OptimizerConfig> all;
    for (const auto& n : builtin_optimizer_names()) {
        const OptimizerConfig* o = cfg.find_optimizer(n);
        all.push_back(o ? *o : builtin_optimizer(n));
    }
    for (const auto& o : cfg.defined_optimizers)
        if (std::find(builtin_optimizer_names().begin(), builtin_optimizer_names().end(), o.name) ==
            builtin_optimizer_names().end())
            all.push_back(o);
    std::vector<MemoryPlan> plans;
    for (const auto& o : all) plans.push_back(build_largest_rank_plan(cfg, table, o, mb, layout));
    // both modes of train.expert_grads side by side (docs/design.md "Deferred expert gradients")
    struct ModeRow {
        std::string mode;
        MemoryPlan plan;
        int64_t largest = -1;
    };
    std::vector<ModeRow> modes;
    for (const ExpertGrads mode : {ExpertGrads::STORED, ExpertGrads::DEFERRED}) {
        if (distributed && mode == ExpertGrads::DEFERRED) continue;  // one process only
        Config mc = cfg;
        mc.train.expert_grads = mode;
        ModeRow r{std::string(choice_name(mode)), build_largest_rank_plan(mc, table, opt, mb, layout)};
        if (budget) r.largest = largest_fitting_microbatch(mc, table, opt, arena_budget, layout);
        modes.push_back(std::move(r));
    }
    // every rank's optimizer state (the other parts are the same on every rank)
    struct RankRow {
        int64_t rank, state_bytes, ranges;
    };
    std::vector<RankRow> ranks;
    if (distributed) {
        for (int64_t r = 0; r < layout.world_size; ++r) {
            ParallelLayout lr = layout;
            lr.rank = r;
            const MemoryPlan pr = build_memory_plan(cfg, table, opt, mb, lr);
            ranks.push_back({r, pr.state_bytes, int64_t(part.owned[size_t(r)].size())});
        }
    }

    // every mode of train.recompute side by side (docs/design.md "Activation recompute")
    std::vector<ModeRow> recompute_modes;
    for (const Recompute mode : {Recompute::BLOCK, Recompute::ATTENTION, Recompute::NONE}) {
        Config mc = cfg;
        mc.train.recompute = mode;
        ModeRow r{std::string(choice_name(mode)), build_largest_rank_plan(mc, table, opt, mb, layout)};
        if (budget) r.largest = largest_fitting_microbatch(mc, table, opt, arena_budget, layout);
        recompute_modes.push_back(std::move(r));
    }

    if (a.json) {
        nlohmann::json j;
        j["config"] = source;
        j["optimizer"] = opt.name;
        j["optimizer_type"] = choice_name(opt.type);
        j["microbatch"] = mb;
        if (!mb_note.empty()) j["microbatch_note"] = mb_note;
        j["backend"] = choice_name(plan_backend(cfg));
        j["seq_len"] = cfg.train.seq_len;
        j["grad_accum_steps"] = rank_batch / mb;
        j["layout"] = {{"world_size", layout.world_size},
                       {"expert_parallel", layout.expert_parallel},
                       {"zero_stage", layout.zero_stage},
                       {"zero", layout.zero()},
                       {"planned_rank", plan_rank}};
        nlohmann::json ranks_json = nlohmann::json::array();
        for (const RankRow& r : ranks)
            ranks_json.push_back({{"rank", r.rank},
                                  {"state_bytes", r.state_bytes},
                                  {"state_gib", gib(r.state_bytes)},
                                  {"owned_ranges", r.ranges}});
        j["ranks"] = ranks_json;
        j["params"] = {
            {"backbone", bb}, {"experts", ex}, {"router", rt}, {"total", total}, {"active_per_token", active}};
        if (sh > 0) j["params"]["shared_experts"] = sh;
        nlohmann::json comps = nlohmann::json::array();
        for (const auto& c : plan.state_components)
            comps.push_back({{"component", c.name},
                             {"params", c.params},
                             {"state_kept", c.state_kept},
                             {"bytes", c.bytes},
                             {"mib", mib(c.bytes)}});
        j["state_components"] = comps;
        auto entry = [](int64_t b) { return nlohmann::json{{"bytes", b}, {"gib", gib(b)}}; };
        j["weights"] = entry(plan.weights_bytes);
        j["gradients"] = entry(plan.grads_bytes);
        j["state"] = entry(plan.state_bytes);
        j["paper_state"] = entry(plan.paper_state_bytes);
        j["activations"] = entry(plan.activation_bytes);
        j["workspace"] = entry(plan.workspace_bytes);
        j["peak"] = entry(plan.peak_bytes);
        if (budget) {
            j["budget"] = {{"bytes", budget->bytes},
                           {"gib", gib(budget->bytes)},
                           {"unit", budget->unit},
                           {"arena_bytes", arena_budget},
                           {"fits", plan.peak_bytes <= arena_budget},
                           {"headroom_gib", gib(arena_budget - plan.peak_bytes)}};
            j["largest_microbatch"] = largest;
        } else {
            j["budget"] = nullptr;
            j["largest_microbatch"] = nullptr;
        }
        nlohmann::json others = nlohmann::json::array();
        for (size_t i = 0; i < all.size(); ++i)
            others.push_back({{"name", all[i].name},
                              {"type", choice_name(all[i].type)},
                              {"state_bytes", plans[i].state_bytes},
                              {"state_gib", gib(plans[i].state_bytes)},
                              {"paper_state_gib", gib(plans[i].paper_state_bytes)},
                              {"peak_gib", gib(plans[i].peak_bytes)}});
        j["optimizers"] = others;
        if (cuda) {
            j["cuda_runtime_overhead"] = {{"bytes", overhead}, {"gib", gib(overhead)}, {"cuda_major", cuda_major}};
            j["device_total"] = entry(plan.peak_bytes + overhead);
        }
        nlohmann::json mj = nlohmann::json::array();
        for (const ModeRow& r : modes)
            mj.push_back({{"expert_grads", r.mode},
                          {"gradients", entry(r.plan.grads_bytes)},
                          {"activations", entry(r.plan.activation_bytes)},
                          {"peak", entry(r.plan.peak_bytes)},
                          {"device_total", entry(r.plan.peak_bytes + overhead)},
                          {"largest_microbatch", budget ? nlohmann::json(r.largest) : nlohmann::json(nullptr)}});
        j["expert_grads"] = choice_name(cfg.train.expert_grads);
        j["expert_grad_modes"] = mj;
        nlohmann::json rj = nlohmann::json::array();
        for (const ModeRow& r : recompute_modes)
            rj.push_back({{"recompute", r.mode},
                          {"activations", entry(r.plan.activation_bytes)},
                          {"peak", entry(r.plan.peak_bytes)},
                          {"largest_microbatch", budget ? nlohmann::json(r.largest) : nlohmann::json(nullptr)}});
        j["recompute"] = choice_name(cfg.train.recompute);
        j["recompute_modes"] = rj;
        std::cout << json_text(j) << "\n";
        return;
    }

    fmt::print("skew plan: {} | optimizer {} ({}) | microbatch {} x {} tokens, {} accumulation steps\n", source,
               opt.name, opt.type, mb, cfg.train.seq_len, rank_batch / mb);
    if (distributed)
        fmt::print(
            "Per rank of {} ranks (expert parallel {}, ZeRO stage {}{}): rank {}, the one with the most optimizer "
            "state; weights and gradients are the rank's{}.\n",
            layout.world_size, layout.expert_parallel, layout.zero_stage,
            layout.zero() ? ": optimizer state and update partitioned" : ": optimizer state replicated", plan_rank,
            layout.expert_parallel > 1 ? fmt::format(" ({} of {} experts per bank)",
                                                     cfg.model.n_experts / layout.expert_parallel, cfg.model.n_experts)
                                       : std::string(""));
    fmt::print(
        "Sizes in GiB (2^30 bytes) and MiB (2^20 bytes), the paper's GB and MB; sized for the {} backend "
        "(runtime.backend: {}).\n",
        plan_backend(cfg), cfg.runtime.backend);
    if (!mb_note.empty()) fmt::print("{}.\n", mb_note);
    fmt::print("\n");
    fmt::print("Parameters by tier\n| tier | parameters |\n| --- | ---: |\n");
    fmt::print("| backbone | {} |\n", millions(bb));
    if (sh > 0) fmt::print("| shared experts | {} |\n", millions(sh));
    fmt::print("| experts | {} |\n| router | {} |\n| total | {} |\n| active per token | {} |\n\n", millions(ex),
               millions(rt), millions(total), millions(active));
    fmt::print(
        "Optimizer state: {} (paper Appendix B)\n| component | parameters | state kept | size |\n| --- | ---: | --- | "
        "---: |\n",
        opt.name);
    for (const auto& c : plan.state_components)
        fmt::print("| {} | {} | {} | {} MiB |\n", c.name, millions(c.params), c.state_kept, mib_text(c.bytes));
    fmt::print("| Total | {} | | {:.2f} GiB |\n", millions(total), gib(plan.state_bytes));
    if (plan.paper_state_bytes != plan.state_bytes)
        fmt::print(
            "(the paper's accounting charges {:.2f} GiB: 4 bytes per parameter; the internal Adam adds {:.2f} GiB)\n",
            gib(plan.paper_state_bytes), gib(plan.state_bytes - plan.paper_state_bytes));
    fmt::print("\nMemory at peak (one flat arena)\n| part | size |\n| --- | ---: |\n");
    fmt::print("| weights (bf16; fp32 norms and router) | {:.2f} GiB |\n", gib(plan.weights_bytes));
    fmt::print("| gradients ({}) | {:.2f} GiB |\n", cfg.runtime.grad_dtype, gib(plan.grads_bytes));
    fmt::print("| optimizer state | {:.2f} GiB |\n", gib(plan.state_bytes));
    fmt::print("| activations (microbatch {}, train.recompute: {}) | {:.2f} GiB |\n", mb, cfg.train.recompute,
               gib(plan.activation_bytes));
    fmt::print("| workspace | {:.2f} GiB |\n", gib(plan.workspace_bytes));
    fmt::print("| **predicted peak** | **{:.2f} GiB** |\n\n", gib(plan.peak_bytes));
    if (cuda)
        fmt::print(
            "Outside the arena: CUDA context and libraries {:.2f} GiB (the CUDA {} constant, measured on an H200); "
            "expected device total {:.2f} GiB.\n\n",
            gib(overhead), cuda_major, gib(plan.peak_bytes + overhead));
    if (budget) {
        fmt::print(
            "Budget {} read as {}: {:.2f} GiB{}.\n", a.budget, budget->unit, gib(budget->bytes),
            cuda ? fmt::format(", {:.2f} GiB for the arena after the CUDA context and libraries", gib(arena_budget))
                 : "");
        if (plan.peak_bytes <= arena_budget)
            fmt::print("Fits: {:.2f} GiB of headroom at microbatch {}.\n", gib(arena_budget - plan.peak_bytes), mb);
        else
            fmt::print("Does NOT fit: {:.2f} GiB over the budget at microbatch {}.\n",
                       gib(plan.peak_bytes - arena_budget), mb);
        if (largest > 0)
            fmt::print("Largest microbatch that fits: {} (a divisor of batch_size {}).\n\n", largest,
                       cfg.train.batch_size);
        else
            fmt::print("No microbatch fits: even microbatch 1 needs {:.2f} GiB.\n\n",
                       gib(build_largest_rank_plan(cfg, table, opt, 1, layout).peak_bytes));
    }
    fmt::print(
        "Expert weight gradients (train.expert_grads; this config: {}), {} at microbatch {}\n"
        "| mode | gradients or kept operands | activations | peak |{}{}\n| --- | ---: | ---: | ---: |{}{}\n",
        cfg.train.expert_grads, opt.name, mb, cuda ? " device total |" : "",
        budget ? " largest microbatch that fits |" : "", cuda ? " ---: |" : "", budget ? " ---: |" : "");
    for (const ModeRow& r : modes)
        fmt::print("| {} | {:.2f} GiB | {:.2f} GiB | {:.2f} GiB |{}{}\n", r.mode, gib(r.plan.grads_bytes),
                   gib(r.plan.activation_bytes), gib(r.plan.peak_bytes),
                   cuda ? fmt::format(" {:.2f} GiB |", gib(r.plan.peak_bytes + overhead)) : "",
                   budget ? fmt::format(" {} |", r.largest > 0 ? std::to_string(r.largest) : std::string("none")) : "");
    fmt::print("\n");
    if (!ranks.empty()) {
        fmt::print("Optimizer state per rank ({})\n| rank | owned ranges | state |\n| ---: | ---: | ---: |\n",
                   opt.name);
        for (const RankRow& r : ranks) fmt::print("| {} | {} | {} MiB |\n", r.rank, r.ranges, mib_text(r.state_bytes));
        fmt::print("\n");
    }
    fmt::print(
        "Activation recompute (train.recompute; this config: {}), {} at microbatch {}: block keeps each block's "
        "input and recomputes the block, attention keeps all but the attention output and logsumexp, none keeps "
        "everything\n| mode | activations | peak |{}\n| --- | ---: | ---: |{}\n",
        cfg.train.recompute, opt.name, mb, budget ? " largest microbatch that fits |" : "", budget ? " ---: |" : "");
    for (const ModeRow& r : recompute_modes)
        fmt::print("| {} | {} MiB | {:.2f} GiB |{}\n", r.mode, mib_text(r.plan.activation_bytes),
                   gib(r.plan.peak_bytes),
                   budget ? fmt::format(" {} |", r.largest > 0 ? std::to_string(r.largest) : std::string("none")) : "");
    fmt::print("\n");
    fmt::print(
        "All optimizers at microbatch {}\n| optimizer | type | state | peak |{}\n| --- | --- | ---: | ---: |{}\n", mb,
        budget ? " fits |" : "", budget ? " --- |" : "");
    for (size_t i = 0; i < all.size(); ++i) {
        std::string state = fmt::format("{:.2f} GiB", gib(plans[i].state_bytes));
        if (plans[i].paper_state_bytes != plans[i].state_bytes)
            state = fmt::format("{:.2f} GiB + {:.2f} internal Adam", gib(plans[i].paper_state_bytes),
                                gib(plans[i].state_bytes - plans[i].paper_state_bytes));
        fmt::print("| {} | {} | {} | {:.2f} GiB |{}\n", all[i].name, all[i].type, state, gib(plans[i].peak_bytes),
                   budget ? (plans[i].peak_bytes <= arena_budget ? " yes |" : " no |") : "");
    }
}

}  // namespace

void register_plan_command(CLI::App& app) {
    auto args = std::make_shared<PlanArgs>();
    CLI::App* cmd =
        app.add_subcommand("plan", "Memory-budget dry run: parameters, optimizer state, peak memory (no GPU needed)");
    cmd->add_option("config", args->config, "Experiment config (YAML); or --hf");
    cmd->add_option("--hf", args->hf,
                    "Plan a published model instead: a Hugging Face checkpoint folder or its config.json "
                    "(MixtralForCausalLM, OlmoeForCausalLM, Qwen3MoeForCausalLM), other sections at their defaults");
    cmd->add_option("--optimizer", args->optimizer,
                    "Optimizer to plan: a built-in name or a key of the config's optimizers section (default: the "
                    "first of train.optimizers)");
    cmd->add_option(
           "--microbatch", args->microbatch,
           "Sequences per forward/backward (default: train.microbatch; with 0 there, the largest that fits --budget)")
        ->check(int_at_least(1))
        ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
    cmd->add_option("--budget", args->budget, "Device memory budget with a unit: 40GiB, 40GB (10^9 bytes), 40960MiB");
    cmd->add_flag("--json", args->json, "Print the same numbers as JSON");
    cmd->add_option("--world-size", args->world_size,
                    "Plan one rank of N (mpirun -np N): the rank with the most state under parallel.zero_stage")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--expert-parallel", args->expert_parallel,
                    "Expert parallelism M (overrides parallel.expert): each rank holds n_experts / M experts per bank")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd->add_option("--set", args->overrides, "Override a config key, e.g. --set train.microbatch=4 (repeatable)")
        ->take_all();
    cmd->callback([args, cmd] {
        args->budget_given = cmd->count("--budget") > 0;
        if (args->config.empty() && args->hf.empty()) throw CLI::RequiredError("config (or --hf)");
        if (!args->config.empty() && !args->hf.empty())
            fail("plan: give either the config {} or --hf {}, not both", args->config, args->hf);
        if (cmd->count("--optimizer") > 0 && args->optimizer.empty())
            fail(
                "--optimizer: empty name; give a built-in or a key of the config's optimizers section, or leave the "
                "flag "
                "out for the first of train.optimizers");
        run_plan(*args);
    });
}

}  // namespace skew::tools
