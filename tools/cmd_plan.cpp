// skew plan: the memory-budget dry run (no GPU needed). Prints the paper's Appendix B table for
// one optimizer, the memory at peak, whether it fits a budget and the largest microbatch that
// does, both train.expert_grads modes and every train.recompute mode, and every optimizer's state
// side by side; --json gives the same numbers for scripts (both from tools/plan_figures.h).
// --world-size N [--expert-parallel M] plans one rank of a distributed run (docs/distributed.md):
// the rank with the most optimizer state under ZeRO-1, and every rank's state.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include "engine/config.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "engine/sizes.h"
#include "plan/plan.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/plan_figures.h"

namespace skew::tools {
namespace {

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

// `skew plan --json`: the figures as one JSON object.
void print_plan_json(const PlanFigures& f) {
    nlohmann::json j;
    j["config"] = f.source;
    j["optimizer"] = f.opt.name;
    j["optimizer_type"] = choice_name(f.opt.type);
    j["microbatch"] = f.mb;
    if (!f.mb_note.empty()) j["microbatch_note"] = f.mb_note;
    j["backend"] = choice_name(plan_backend(f.cfg));
    j["seq_len"] = f.cfg.train.seq_len;
    j["grad_accum_steps"] = f.rank_batch / f.mb;
    j["layout"] = {{"world_size", f.layout.world_size},
                   {"expert_parallel", f.layout.expert_parallel},
                   {"zero_stage", f.layout.zero_stage},
                   {"zero", f.layout.zero()},
                   {"planned_rank", f.plan_rank}};
    nlohmann::json ranks_json = nlohmann::json::array();
    for (const PlanRankRow& r : f.ranks)
        ranks_json.push_back({{"rank", r.rank},
                              {"state_bytes", r.state_bytes},
                              {"state_gib", gib(r.state_bytes)},
                              {"owned_ranges", r.ranges}});
    j["ranks"] = ranks_json;
    j["params"] = {{"backbone", f.backbone},
                   {"experts", f.experts},
                   {"router", f.router},
                   {"total", f.total},
                   {"active_per_token", f.active}};
    if (f.shared_experts > 0) j["params"]["shared_experts"] = f.shared_experts;
    nlohmann::json comps = nlohmann::json::array();
    for (const auto& c : f.plan.state_components)
        comps.push_back({{"component", c.name},
                         {"params", c.params},
                         {"state_kept", c.state_kept},
                         {"bytes", c.bytes},
                         {"mib", mib(c.bytes)}});
    j["state_components"] = comps;
    auto entry = [](int64_t b) { return nlohmann::json{{"bytes", b}, {"gib", gib(b)}}; };
    j["weights"] = entry(f.plan.weights_bytes);
    j["gradients"] = entry(f.plan.grads_bytes);
    j["state"] = entry(f.plan.state_bytes);
    j["paper_state"] = entry(f.plan.paper_state_bytes);
    j["activations"] = entry(f.plan.activation_bytes);
    j["workspace"] = entry(f.plan.workspace_bytes);
    j["peak"] = entry(f.plan.peak_bytes);
    if (f.budget) {
        j["budget"] = {{"bytes", f.budget->bytes},
                       {"gib", gib(f.budget->bytes)},
                       {"unit", f.budget->unit},
                       {"arena_bytes", f.arena_budget},
                       {"fits", f.plan.peak_bytes <= f.arena_budget},
                       {"headroom_gib", gib(f.arena_budget - f.plan.peak_bytes)}};
        j["largest_microbatch"] = f.largest;
    } else {
        j["budget"] = nullptr;
        j["largest_microbatch"] = nullptr;
    }
    nlohmann::json others = nlohmann::json::array();
    for (size_t i = 0; i < f.all.size(); ++i)
        others.push_back({{"name", f.all[i].name},
                          {"type", choice_name(f.all[i].type)},
                          {"state_bytes", f.plans[i].state_bytes},
                          {"state_gib", gib(f.plans[i].state_bytes)},
                          {"paper_state_gib", gib(f.plans[i].paper_state_bytes)},
                          {"peak_gib", gib(f.plans[i].peak_bytes)}});
    j["optimizers"] = others;
    if (f.cuda) {
        j["cuda_runtime_overhead"] = {{"bytes", f.overhead}, {"gib", gib(f.overhead)}, {"cuda_major", f.cuda_major}};
        j["device_total"] = entry(f.plan.peak_bytes + f.overhead);
    }
    nlohmann::json mj = nlohmann::json::array();
    for (const PlanModeRow& r : f.expert_grad_modes)
        mj.push_back({{"expert_grads", r.mode},
                      {"gradients", entry(r.plan.grads_bytes)},
                      {"activations", entry(r.plan.activation_bytes)},
                      {"peak", entry(r.plan.peak_bytes)},
                      {"device_total", entry(r.plan.peak_bytes + f.overhead)},
                      {"largest_microbatch", f.budget ? nlohmann::json(r.largest) : nlohmann::json(nullptr)}});
    j["expert_grads"] = choice_name(f.cfg.train.expert_grads);
    j["expert_grad_modes"] = mj;
    nlohmann::json rj = nlohmann::json::array();
    for (const PlanModeRow& r : f.recompute_modes)
        rj.push_back({{"recompute", r.mode},
                      {"activations", entry(r.plan.activation_bytes)},
                      {"peak", entry(r.plan.peak_bytes)},
                      {"largest_microbatch", f.budget ? nlohmann::json(r.largest) : nlohmann::json(nullptr)}});
    j["recompute"] = choice_name(f.cfg.train.recompute);
    j["recompute_modes"] = rj;
    std::cout << json_text(j) << "\n";
}

// `skew plan`: the figures as Markdown tables.
void print_plan_text(const PlanFigures& f, const PlanArgs& a) {
    fmt::print("skew plan: {} | optimizer {} ({}) | microbatch {} x {} tokens, {} accumulation steps\n", f.source,
               f.opt.name, f.opt.type, f.mb, f.cfg.train.seq_len, f.rank_batch / f.mb);
    if (f.distributed)
        fmt::print(
            "Per rank of {} ranks (expert parallel {}, ZeRO stage {}{}): rank {}, the one with the most optimizer "
            "state; weights and gradients are the rank's{}.\n",
            f.layout.world_size, f.layout.expert_parallel, f.layout.zero_stage,
            f.layout.zero() ? ": optimizer state and update partitioned" : ": optimizer state replicated", f.plan_rank,
            f.layout.expert_parallel > 1
                ? fmt::format(" ({} of {} experts per bank)", f.cfg.model.n_experts / f.layout.expert_parallel,
                              f.cfg.model.n_experts)
                : std::string(""));
    fmt::print(
        "Sizes in GiB (2^30 bytes) and MiB (2^20 bytes), the paper's GB and MB; sized for the {} backend "
        "(runtime.backend: {}).\n",
        plan_backend(f.cfg), f.cfg.runtime.backend);
    if (!f.mb_note.empty()) fmt::print("{}.\n", f.mb_note);
    fmt::print("\n");
    fmt::print("Parameters by tier\n| tier | parameters |\n| --- | ---: |\n");
    fmt::print("| backbone | {} |\n", millions(f.backbone));
    if (f.shared_experts > 0) fmt::print("| shared experts | {} |\n", millions(f.shared_experts));
    fmt::print("| experts | {} |\n| router | {} |\n| total | {} |\n| active per token | {} |\n\n", millions(f.experts),
               millions(f.router), millions(f.total), millions(f.active));
    fmt::print(
        "Optimizer state: {} (paper Appendix B)\n| component | parameters | state kept | size |\n| --- | ---: | --- | "
        "---: |\n",
        f.opt.name);
    for (const auto& c : f.plan.state_components)
        fmt::print("| {} | {} | {} | {} MiB |\n", c.name, millions(c.params), c.state_kept, mib_text(c.bytes));
    fmt::print("| Total | {} | | {:.2f} GiB |\n", millions(f.total), gib(f.plan.state_bytes));
    if (f.plan.paper_state_bytes != f.plan.state_bytes)
        fmt::print(
            "(the paper's accounting charges {:.2f} GiB: 4 bytes per parameter; the internal Adam adds {:.2f} GiB)\n",
            gib(f.plan.paper_state_bytes), gib(f.plan.state_bytes - f.plan.paper_state_bytes));
    fmt::print("\nMemory at peak (one flat arena)\n| part | size |\n| --- | ---: |\n");
    fmt::print("| weights (bf16; fp32 norms and router) | {:.2f} GiB |\n", gib(f.plan.weights_bytes));
    fmt::print("| gradients ({}) | {:.2f} GiB |\n", f.cfg.runtime.grad_dtype, gib(f.plan.grads_bytes));
    fmt::print("| optimizer state | {:.2f} GiB |\n", gib(f.plan.state_bytes));
    fmt::print("| activations (microbatch {}, train.recompute: {}) | {:.2f} GiB |\n", f.mb, f.cfg.train.recompute,
               gib(f.plan.activation_bytes));
    fmt::print("| workspace | {:.2f} GiB |\n", gib(f.plan.workspace_bytes));
    fmt::print("| **predicted peak** | **{:.2f} GiB** |\n\n", gib(f.plan.peak_bytes));
    if (f.cuda)
        fmt::print(
            "Outside the arena: CUDA context and libraries {:.2f} GiB (the CUDA {} constant, measured on an H200); "
            "expected device total {:.2f} GiB.\n\n",
            gib(f.overhead), f.cuda_major, gib(f.plan.peak_bytes + f.overhead));
    if (f.budget) {
        fmt::print(
            "Budget {} read as {}: {:.2f} GiB{}.\n", a.budget, f.budget->unit, gib(f.budget->bytes),
            f.cuda ? fmt::format(", {:.2f} GiB for the arena after the CUDA context and libraries", gib(f.arena_budget))
                   : "");
        if (f.plan.peak_bytes <= f.arena_budget)
            fmt::print("Fits: {:.2f} GiB of headroom at microbatch {}.\n", gib(f.arena_budget - f.plan.peak_bytes),
                       f.mb);
        else
            fmt::print("Does NOT fit: {:.2f} GiB over the budget at microbatch {}.\n",
                       gib(f.plan.peak_bytes - f.arena_budget), f.mb);
        if (f.largest > 0)
            fmt::print("Largest microbatch that fits: {} (a divisor of batch_size {}).\n\n", f.largest,
                       f.cfg.train.batch_size);
        else
            fmt::print("No microbatch fits: even microbatch 1 needs {:.2f} GiB.\n\n",
                       gib(build_largest_rank_plan(f.cfg, f.table, f.opt, 1, f.layout).peak_bytes));
    }
    fmt::print(
        "Expert weight gradients (train.expert_grads; this config: {}), {} at microbatch {}\n"
        "| mode | gradients or kept operands | activations | peak |{}{}\n| --- | ---: | ---: | ---: |{}{}\n",
        f.cfg.train.expert_grads, f.opt.name, f.mb, f.cuda ? " device total |" : "",
        f.budget ? " largest microbatch that fits |" : "", f.cuda ? " ---: |" : "", f.budget ? " ---: |" : "");
    for (const PlanModeRow& r : f.expert_grad_modes)
        fmt::print(
            "| {} | {:.2f} GiB | {:.2f} GiB | {:.2f} GiB |{}{}\n", r.mode, gib(r.plan.grads_bytes),
            gib(r.plan.activation_bytes), gib(r.plan.peak_bytes),
            f.cuda ? fmt::format(" {:.2f} GiB |", gib(r.plan.peak_bytes + f.overhead)) : "",
            f.budget ? fmt::format(" {} |", r.largest > 0 ? std::to_string(r.largest) : std::string("none")) : "");
    fmt::print("\n");
    if (!f.ranks.empty()) {
        fmt::print("Optimizer state per rank ({})\n| rank | owned ranges | state |\n| ---: | ---: | ---: |\n",
                   f.opt.name);
        for (const PlanRankRow& r : f.ranks)
            fmt::print("| {} | {} | {} MiB |\n", r.rank, r.ranges, mib_text(r.state_bytes));
        fmt::print("\n");
    }
    fmt::print(
        "Activation recompute (train.recompute; this config: {}), {} at microbatch {}: block keeps each block's "
        "input and recomputes the block, attention keeps all but the attention output and logsumexp, none keeps "
        "everything\n| mode | activations | peak |{}\n| --- | ---: | ---: |{}\n",
        f.cfg.train.recompute, f.opt.name, f.mb, f.budget ? " largest microbatch that fits |" : "",
        f.budget ? " ---: |" : "");
    for (const PlanModeRow& r : f.recompute_modes)
        fmt::print(
            "| {} | {} MiB | {:.2f} GiB |{}\n", r.mode, mib_text(r.plan.activation_bytes), gib(r.plan.peak_bytes),
            f.budget ? fmt::format(" {} |", r.largest > 0 ? std::to_string(r.largest) : std::string("none")) : "");
    fmt::print("\n");
    fmt::print(
        "All optimizers at microbatch {}\n| optimizer | type | state | peak |{}\n| --- | --- | ---: | ---: |{}\n", f.mb,
        f.budget ? " fits |" : "", f.budget ? " --- |" : "");
    for (size_t i = 0; i < f.all.size(); ++i) {
        std::string state = fmt::format("{:.2f} GiB", gib(f.plans[i].state_bytes));
        if (f.plans[i].paper_state_bytes != f.plans[i].state_bytes)
            state = fmt::format("{:.2f} GiB + {:.2f} internal Adam", gib(f.plans[i].paper_state_bytes),
                                gib(f.plans[i].state_bytes - f.plans[i].paper_state_bytes));
        fmt::print("| {} | {} | {} | {:.2f} GiB |{}\n", f.all[i].name, f.all[i].type, state, gib(f.plans[i].peak_bytes),
                   f.budget ? (f.plans[i].peak_bytes <= f.arena_budget ? " yes |" : " no |") : "");
    }
}

void run_plan(const PlanArgs& a) {
    const PlanFigures f = plan_figures(a);
    if (a.json) print_plan_json(f);
    else print_plan_text(f, a);
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
                "--optimizer: empty name; give a built-in or a key of the config's optimizers section, or leave "
                "the flag out for the first of train.optimizers");
        run_plan(*args);
    });
}

}  // namespace skew::tools
