// skew report RUNDIR: the paper's Table 1 for a run (state, peak memory, tokens/s, validation
// perplexity, balance loss per optimizer) and Appendix C's perplexity at every evaluation step,
// as Markdown, from the run's metrics_<optimizer>.json files.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "engine/error.h"
#include "engine/memory_plan.h"
#include "engine/metrics.h"
#include "engine/status_line.h"
#include "tools/commands.h"

namespace skew::tools {
namespace {

namespace fs = std::filesystem;

const char* DASH = "—";

// Fixed decimals with thousands separators: 2703.14 -> "2,703.1".
std::string fixed(double v, int decimals) {
    if (!std::isfinite(v)) return DASH;
    const double scale = std::pow(10.0, decimals);
    const int64_t units = std::llround(std::fabs(v) * scale);
    std::string s = with_thousands(units / int64_t(scale));
    if (decimals > 0) s += fmt::format(".{:0{}}", units % int64_t(scale), decimals);
    return (v < 0 && units != 0 ? "-" : "") + s;
}

// Sizes in one unit per column: GiB when the column's largest value reaches 1 GiB, else MiB.
struct SizeUnit {
    const char* name;
    double bytes;
};
SizeUnit unit_for(const std::vector<int64_t>& values) {
    int64_t most = values.empty() ? 0 : *std::max_element(values.begin(), values.end());
    return double(most) >= GIB ? SizeUnit{"GiB", GIB} : SizeUnit{"MiB", MIB};
}
std::string size_text(int64_t bytes, SizeUnit u) { return bytes > 0 ? fixed(double(bytes) / u.bytes, 2) : DASH; }

// The metrics files of a run, in the order of the run's train.optimizers (then by name).
std::vector<RunMetrics> load_run(const std::string& run_dir) {
    if (!fs::is_directory(run_dir)) fail("{}: no such run folder", run_dir);
    std::vector<std::string> paths;
    for (const auto& e : fs::directory_iterator(run_dir)) {
        const std::string n = e.path().filename().string();
        if (e.is_regular_file() && n.starts_with("metrics_") && n.ends_with(".json")) paths.push_back(e.path().string());
    }
    if (paths.empty()) fail("{}: no metrics_*.json files (skew train writes them; is this a run folder?)", run_dir);
    std::sort(paths.begin(), paths.end());
    std::vector<RunMetrics> runs;
    for (const auto& p : paths) runs.push_back(read_metrics(p));
    std::vector<std::string> order;
    for (const auto& r : runs) {
        const auto& cfg = r.config;
        if (cfg.is_object() && cfg.contains("train") && cfg["train"].is_object() && cfg["train"].contains("optimizers") &&
            cfg["train"]["optimizers"].is_array()) {
            for (const auto& o : cfg["train"]["optimizers"])
                if (o.is_string()) order.push_back(o.get<std::string>());
            break;
        }
    }
    auto rank = [&](const RunMetrics& r) {
        auto it = std::find(order.begin(), order.end(), r.optimizer);
        return it == order.end() ? order.size() : size_t(it - order.begin());
    };
    std::stable_sort(runs.begin(), runs.end(), [&](const RunMetrics& a, const RunMetrics& b) { return rank(a) < rank(b); });
    return runs;
}

// The balance-loss floor under uniform routing: alpha times the number of MoE blocks (design.md).
double balance_floor(const RunMetrics& r) {
    const auto& cfg = r.config;
    if (!cfg.is_object() || !cfg.contains("model") || !cfg["model"].is_object()) return NO_VALUE;
    const auto& m = cfg["model"];
    if (!m.contains("balance_loss_coef") || !m["balance_loss_coef"].is_number()) return NO_VALUE;
    const double blocks = m.contains("moe_blocks") && m["moe_blocks"].is_array() ? double(m["moe_blocks"].size()) : 1.0;
    return m["balance_loss_coef"].get<double>() * blocks;
}

// Throughput "measured at the final step" (Table 1): the last evaluation's, else the run's mean.
double final_tokens_per_sec(const RunMetrics& r) {
    if (!r.history.empty() && std::isfinite(r.history.back().tokens_per_sec)) return r.history.back().tokens_per_sec;
    return r.summary.mean_tokens_per_sec;
}

std::string render(const std::string& run_dir, const std::vector<RunMetrics>& runs) {
    std::string out = fmt::format("# skew report: {}\n\n", run_dir);
    int64_t steps = 0;
    for (const auto& r : runs) steps = std::max(steps, r.summary.steps);

    std::vector<int64_t> states, peaks;
    for (const auto& r : runs) {
        states.push_back(r.paper_state_bytes);
        peaks.push_back(r.peak_memory_bytes);
    }
    const SizeUnit su = unit_for(states), pu = unit_for(peaks);
    out += fmt::format("## Table 1: {} steps from a shared initialization\n\n", with_thousands(steps));
    out += fmt::format("| Optimizer | State ({}) | Peak mem. ({}) | Tokens/s | Val. PPL ↓ | Balance loss |\n", su.name, pu.name);
    out += "| --- | ---: | ---: | ---: | ---: | ---: |\n";
    std::vector<std::string> notes;
    for (const auto& r : runs) {
        std::string state = size_text(r.paper_state_bytes, su);
        if (r.state_bytes != r.paper_state_bytes) {
            state += "†";
            notes.push_back(fmt::format("†{}: the paper's accounting (one fp32 buffer per parameter); with the state it keeps for "
                                        "embeddings, router and vectors the plan holds {} {}.",
                                        r.optimizer, size_text(r.state_bytes, su), su.name));
        }
        const double tps = final_tokens_per_sec(r);
        out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.optimizer, state, size_text(r.peak_memory_bytes, pu),
                           std::isfinite(tps) ? with_thousands(std::llround(tps)) : DASH, fixed(r.summary.final_val_ppl, 1),
                           fixed(r.summary.final_balance_loss, 4));
    }
    out += "\n";
    for (const auto& n : notes) out += n + "\n";
    if (!notes.empty()) out += "\n";
    out += "State sizes are analytic (the memory plan, paper Appendix B); peak memory and throughput are measured at the "
           "final evaluation; validation perplexity and balance loss are those of the final evaluation.";
    if (!runs.empty() && std::isfinite(balance_floor(runs.front())))
        out += fmt::format(" Balance loss has a floor of {} under uniform routing.", fmt::format("{}", balance_floor(runs.front())));
    if (!runs.empty() && std::isfinite(runs.front().unigram_val_ppl))
        out += fmt::format(" The unigram baseline (the training split's token frequencies) has validation perplexity {:.1f}.",
                           runs.front().unigram_val_ppl);
    out += "\n\n";

    // Appendix C: validation perplexity at every evaluation step, the best of each step in bold.
    std::set<int64_t> step_set;
    for (const auto& r : runs)
        for (const auto& e : r.history) step_set.insert(e.step);
    out += "## Validation perplexity at each evaluation step (Appendix C)\n\n";
    if (step_set.empty()) return out + "No evaluations recorded.\n";
    const std::vector<int64_t> eval_steps(step_set.begin(), step_set.end());
    std::vector<std::map<int64_t, double>> ppl(runs.size());
    for (size_t i = 0; i < runs.size(); ++i)
        for (const auto& e : runs[i].history) ppl[i][e.step] = e.val_ppl;
    out += "| Step |";
    for (int64_t s : eval_steps) out += fmt::format(" {} |", with_thousands(s));
    out += "\n| --- |";
    for (size_t k = 0; k < eval_steps.size(); ++k) out += " ---: |";
    out += "\n";
    for (size_t i = 0; i < runs.size(); ++i) {
        out += fmt::format("| {} |", runs[i].optimizer);
        for (int64_t s : eval_steps) {
            auto it = ppl[i].find(s);
            if (it == ppl[i].end() || !std::isfinite(it->second)) {
                out += fmt::format(" {} |", DASH);
                continue;
            }
            int with_value = 0;
            bool best = true;
            for (size_t o = 0; o < runs.size(); ++o) {
                auto jt = ppl[o].find(s);
                if (jt == ppl[o].end() || !std::isfinite(jt->second)) continue;
                ++with_value;
                if (jt->second < it->second) best = false;
            }
            const std::string v = fixed(it->second, 1);
            out += best && with_value > 1 ? fmt::format(" **{}** |", v) : fmt::format(" {} |", v);
        }
        out += "\n";
    }
    if (runs.size() > 1) out += "\nBold marks the best optimizer at each step.\n";
    return out;
}

}  // namespace

void register_report_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("report", "Print the paper's Table 1 and per-evaluation perplexity (Appendix C) for a run, as Markdown");
    auto run_dir = std::make_shared<std::string>();
    cmd->add_option("RUNDIR", *run_dir, "Run folder holding metrics_<optimizer>.json (skew train --out)")->required();
    cmd->callback([run_dir] { std::cout << render(*run_dir, load_run(*run_dir)) << std::flush; });
}

}  // namespace skew::tools
