// skew report RUNDIR: the paper's Table 1 for a run (state, peak memory, tokens/s, validation
// perplexity, balance loss per optimizer) and Appendix C's perplexity at every evaluation step,
// as Markdown, from the run's metrics_<optimizer>.json files, checked against its config.yaml
// (train.optimizers, train.steps): optimizers not run or stopped early are shown as such.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "checkpoint/run_folder.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/memory_plan.h"
#include "tools/commands.h"
#include "tools/report_table9.h"
#include "train/metrics.h"
#include "train/status_line.h"

namespace skew::tools {
namespace {

namespace fs = std::filesystem;

const char* DASH = "—";

// Fixed decimals with thousands separators: 2703.14 -> "2,703.1".
// Not measured: a dash; overflowed: "inf"; 1e9 and more in exponent form.
std::string fixed(double v, int decimals) {
    if (std::isnan(v)) return DASH;
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (std::fabs(v) >= 1e9) return fmt::format("{:.3e}", v);
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

// What the run's config.yaml says it was to do: train.optimizers for train.steps each. Folders
// without one (written before config.yaml existed) give `known = false`.
struct Protocol {
    bool known = false;
    std::string config_path;
    std::vector<std::string> optimizers;
    int64_t steps = 0;
};

// One row of the report: a configured optimizer and its metrics, if it has any.
struct Row {
    std::string optimizer;
    std::optional<RunMetrics> m;  // nullopt: not run (no metrics file)
    std::string path;             // its metrics file
    int64_t steps_done = 0;       // the larger of summary.steps and the last evaluation's step
    bool complete = true;         // ran train.steps (always true when the protocol is unknown)
};

struct Run {
    std::string dir;
    Protocol protocol;
    std::vector<Row> rows;  // train.optimizers order (then by name without config.yaml)

    bool complete() const {
        return std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.complete; });
    }
};

const nlohmann::json* json_at(const nlohmann::json& j, const char* section, const char* key) {
    if (!j.is_object() || !j.contains(section) || !j[section].is_object() || !j[section].contains(key)) return nullptr;
    return &j[section][key];
}

// A metrics file the report can trust: its optimizer is the one its name says, its evaluations are
// in strictly increasing step order, and (with config.yaml) none is past train.steps and it was
// written by a run of that many steps. Throws skew::Error naming the file.
void check_metrics(const RunMetrics& m, const std::string& path, const std::string& expected_optimizer,
                   const Protocol& p) {
    if (m.optimizer != expected_optimizer)
        fail("{}: holds the metrics of optimizer '{}', but its name says '{}'", path, m.optimizer, expected_optimizer);
    for (size_t i = 1; i < m.history.size(); ++i)
        if (m.history[i].step <= m.history[i - 1].step)
            fail(
                "{}: history is not in strictly increasing step order (evaluation {} is at step {}, after step {}); "
                "skew train never writes that — was the file edited or merged?",
                path, i + 1, m.history[i].step, m.history[i - 1].step);
    if (!m.history.empty() && m.history.front().step < 1)
        fail("{}: history has an evaluation at step {} (steps are 1-based)", path, m.history.front().step);
    if (!p.known) return;
    const int64_t last = m.history.empty() ? 0 : m.history.back().step;
    if (last > p.steps || m.summary.steps > p.steps)
        fail("{}: records step {}, past train.steps = {} of {}; is it from another run?", path,
             std::max(last, m.summary.steps), p.steps, p.config_path);
    if (const nlohmann::json* s = json_at(m.config, "train", "steps");
        s && s->is_number_integer() && s->get<int64_t>() != p.steps)
        fail("{}: written by a run of train.steps = {}, but {} says {}; is it from another run?", path,
             s->get<int64_t>(), p.config_path, p.steps);
}

// The run folder: config.yaml's protocol and a row per configured optimizer (or, without
// config.yaml, per metrics file). A metrics file of an optimizer config.yaml does not list is
// ignored with a warning on stderr.
Run load_run(const std::string& run_dir) {
    std::error_code ec;
    if (!fs::exists(run_dir, ec)) fail("{}: no such run folder", run_dir);
    if (!fs::is_directory(run_dir, ec)) {
        const fs::path p(run_dir);
        const std::string name = p.filename().string();
        const std::string parent = p.parent_path().empty() ? "." : p.parent_path().string();
        if (name == CONFIG_FILE || RunFolder::metrics_optimizer(name))
            fail("{}: is a file, not a run folder; give the folder holding it: skew report {}", run_dir, parent);
        fail(
            "{}: is a file, not a run folder (give the folder `skew train --out` wrote, holding config.yaml and "
            "metrics_<optimizer>.json)",
            run_dir);
    }
    Run run;
    run.dir = run_dir;
    std::map<std::string, std::string> files;  // optimizer name -> metrics file
    for (const auto& e : fs::directory_iterator(run_dir)) {
        const std::optional<std::string> optimizer = RunFolder::metrics_optimizer(e.path().filename().string());
        if (e.is_regular_file() && optimizer) files[*optimizer] = e.path().string();
    }
    const fs::path config_path = RunFolder{run_dir}.config();
    Protocol& p = run.protocol;
    if (fs::exists(config_path, ec)) {
        // As `skew train --resume` reads it: the config the run was started with, resolved.
        const Config cfg = load_config(config_path.string());
        p.known = true;
        p.config_path = config_path.string();
        p.optimizers = cfg.train.optimizers;
        p.steps = cfg.train.steps;
        for (const auto& [name, path] : files)
            if (std::find(p.optimizers.begin(), p.optimizers.end(), name) == p.optimizers.end())
                std::cerr << fmt::format(
                    "skew: warning: {}: ignored; optimizer '{}' is not in {}'s train.optimizers ({}) — "
                    "a metrics file from another run?\n",
                    path, name, p.config_path, fmt::join(p.optimizers, ", "));
        for (const std::string& name : p.optimizers) {
            Row r;
            r.optimizer = name;
            r.complete = false;
            auto it = files.find(name);
            if (it != files.end()) {
                r.path = it->second;
                r.m = read_metrics(r.path);
                check_metrics(*r.m, r.path, name, p);
                r.steps_done =
                    std::max(r.m->summary.steps, r.m->history.empty() ? int64_t(0) : r.m->history.back().step);
                r.complete = r.steps_done == p.steps;
            }
            run.rows.push_back(std::move(r));
        }
        return run;
    }
    // No config.yaml: every metrics file, in the train.optimizers order the first one records.
    if (files.empty()) fail("{}: no metrics_*.json files (skew train writes them; is this a run folder?)", run_dir);
    std::vector<std::string> order;
    for (const auto& [name, path] : files) {
        Row r;
        r.optimizer = name;
        r.path = path;
        r.m = read_metrics(path);
        check_metrics(*r.m, path, name, p);
        r.steps_done = r.m->summary.steps;
        if (order.empty())
            if (const nlohmann::json* o = json_at(r.m->config, "train", "optimizers"); o && o->is_array())
                for (const auto& x : *o)
                    if (x.is_string()) order.push_back(x.get<std::string>());
        run.rows.push_back(std::move(r));
    }
    auto rank = [&](const Row& r) {
        auto it = std::find(order.begin(), order.end(), r.optimizer);
        return it == order.end() ? order.size() : size_t(it - order.begin());
    };
    std::stable_sort(run.rows.begin(), run.rows.end(), [&](const Row& a, const Row& b) { return rank(a) < rank(b); });
    return run;
}

// The balance-loss floor under uniform routing: alpha times the number of MoE blocks (docs/design.md).
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

// "15 / 30" for a row of a known protocol; "not run (no metrics file)" without metrics.
std::string steps_cell(const Row& r, const Protocol& p) {
    if (!r.m) return "not run (no metrics file)";
    if (!r.m->summary.stop_reason.empty())
        return fmt::format("{} / {} (stopped at step {})", with_thousands(r.steps_done), with_thousands(p.steps),
                           with_thousands(r.m->summary.stopped_at_step));
    return fmt::format("{} / {}", with_thousands(r.steps_done), with_thousands(p.steps));
}

// What the title and the note under it say about completeness: which optimizers did not run or
// stopped early, and from which evaluation their values come.
std::string completeness_note(const Run& run) {
    const Protocol& p = run.protocol;
    if (!p.known)
        return fmt::format(
            "No config.yaml in {} (a run folder from before skew wrote one): the report could not check that "
            "every configured optimizer ran all its steps.\n\n",
            run.dir);
    if (run.complete()) return "";
    std::vector<std::string> not_run, stopped;
    int completed = 0;
    for (const Row& r : run.rows) {
        if (r.complete) ++completed;
        else if (!r.m) not_run.push_back(r.optimizer);
        else if (!r.m->summary.stop_reason.empty())  // the trainer stopped it on a fault
            stopped.push_back(fmt::format("{} stopped at step {} ({}){}", r.optimizer,
                                          with_thousands(r.m->summary.stopped_at_step), r.m->summary.stop_reason,
                                          r.m->history.empty()
                                              ? " before its first evaluation"
                                              : fmt::format(", its values are from the step-{} evaluation",
                                                            with_thousands(r.m->history.back().step))));
        else if (r.m->history.empty())
            stopped.push_back(
                fmt::format("{} at step {} (no evaluation yet)", r.optimizer, with_thousands(r.steps_done)));
        else
            stopped.push_back(fmt::format("{} at step {} (its values are from the step-{} evaluation)", r.optimizer,
                                          with_thousands(r.steps_done), with_thousands(r.m->history.back().step)));
    }
    std::string out =
        fmt::format("Incomplete run: {} of {} optimizers in {}'s train.optimizers completed the {} steps.", completed,
                    run.rows.size(), p.config_path, with_thousands(p.steps));
    if (!stopped.empty()) out += fmt::format(" Stopped early: {}.", fmt::join(stopped, "; "));
    if (!not_run.empty()) out += fmt::format(" Not run (no metrics file): {}.", fmt::join(not_run, ", "));
    out += fmt::format(
        " Rows that did not complete are not comparable with those that did and are never marked best; "
        "continue the run with `skew train --resume {}`.\n\n",
        run.dir);
    return out;
}

std::string render(const Run& run) {
    const Protocol& p = run.protocol;
    std::vector<const RunMetrics*> measured;  // the rows with metrics
    for (const Row& r : run.rows)
        if (r.m) measured.push_back(&*r.m);
    std::string out = fmt::format("# skew report: {}\n\n", run.dir);
    int64_t steps = p.steps;
    if (!p.known)
        for (const RunMetrics* m : measured) steps = std::max(steps, m->summary.steps);

    std::vector<int64_t> states, peaks;
    for (const RunMetrics* m : measured) {
        states.push_back(m->paper_state_bytes);
        peaks.push_back(m->peak_memory_bytes);
    }
    const SizeUnit su = unit_for(states), pu = unit_for(peaks);
    // A Steps column only when some optimizer did not complete the configured steps.
    const bool steps_column = p.known && !run.complete();
    out += fmt::format("## Table 1: {} steps from a shared initialization{}\n\n", with_thousands(steps),
                       steps_column ? " (incomplete run)" : "");
    out += completeness_note(run);
    out += fmt::format("| Optimizer |{} State ({}) | Peak mem. ({}) | Tokens/s | Val. PPL ↓ | Balance loss |\n",
                       steps_column ? " Steps |" : "", su.name, pu.name);
    out += steps_column ? "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
                        : "| --- | ---: | ---: | ---: | ---: | ---: |\n";
    std::vector<std::string> notes;
    for (const Row& row : run.rows) {
        const std::string steps_text = steps_column ? " " + steps_cell(row, p) + " |" : "";
        if (!row.m) {
            out += fmt::format("| {} |{} {} | {} | {} | {} | {} |\n", row.optimizer, steps_text, DASH, DASH, DASH, DASH,
                               DASH);
            continue;
        }
        const RunMetrics& r = *row.m;
        std::string state = size_text(r.paper_state_bytes, su);
        if (r.state_bytes != r.paper_state_bytes) {
            state += "†";
            notes.push_back(
                fmt::format("†{}: the paper's accounting (one fp32 buffer per parameter); with the state it keeps for "
                            "embeddings, router and vectors the plan holds {} {}.",
                            r.optimizer, size_text(r.state_bytes, su), su.name));
        }
        const double tps = final_tokens_per_sec(r);
        out += fmt::format("| {} |{} {} | {} | {} | {} | {} |\n", r.optimizer, steps_text, state,
                           size_text(r.peak_memory_bytes, pu),
                           !std::isfinite(tps)     ? DASH
                           : std::fabs(tps) < 9e18 ? with_thousands(std::llround(tps))
                                                   : fmt::format("{:.3g}", tps),
                           fixed(r.summary.final_val_ppl, 1) + (run_diverged(r) ? " (diverged)" : ""),
                           fixed(r.summary.final_balance_loss, 4));
    }
    out += "\n";
    for (const auto& n : notes) out += n + "\n";
    if (!notes.empty()) out += "\n";
    out +=
        "State sizes are analytic (the memory plan, paper Appendix B); peak memory and throughput are measured at the "
        "final evaluation; validation perplexity and balance loss are those of the final evaluation.";
    if (!measured.empty() && std::isfinite(balance_floor(*measured.front())))
        out += fmt::format(" Balance loss has a floor of {} under uniform routing.",
                           fmt::format("{}", balance_floor(*measured.front())));
    if (!measured.empty() && std::isfinite(measured.front()->unigram_val_ppl))
        out += fmt::format(
            " The unigram baseline (the training split's token frequencies) has validation perplexity {:.1f}.",
            measured.front()->unigram_val_ppl);
    out += "\n\n";

    // Appendix C: validation perplexity at every evaluation step, the best of each step in bold
    // (among the optimizers that completed the configured steps).
    std::set<int64_t> step_set;
    for (const RunMetrics* m : measured)
        for (const auto& e : m->history) step_set.insert(e.step);
    out += "## Validation perplexity at each evaluation step (Appendix C)\n\n";
    if (step_set.empty()) return out + "No evaluations recorded.\n";
    const std::vector<int64_t> eval_steps(step_set.begin(), step_set.end());
    std::vector<std::map<int64_t, double>> ppl(run.rows.size());
    for (size_t i = 0; i < run.rows.size(); ++i)
        if (run.rows[i].m)
            for (const auto& e : run.rows[i].m->history) ppl[i][e.step] = e.val_ppl;
    out += "| Step |";
    for (int64_t s : eval_steps) out += fmt::format(" {} |", with_thousands(s));
    out += "\n| --- |";
    for (size_t k = 0; k < eval_steps.size(); ++k) out += " ---: |";
    out += "\n";
    size_t comparable = 0;
    for (const Row& r : run.rows) comparable += r.m && r.complete;
    for (size_t i = 0; i < run.rows.size(); ++i) {
        out += fmt::format("| {} |", run.rows[i].optimizer);
        for (int64_t s : eval_steps) {
            auto it = ppl[i].find(s);
            if (it == ppl[i].end() || !std::isfinite(it->second)) {  // missing: a dash; overflowed: inf
                out += fmt::format(" {} |", it == ppl[i].end() ? DASH : fixed(it->second, 1));
                continue;
            }
            int with_value = 0;
            bool best = run.rows[i].complete;
            for (size_t o = 0; o < run.rows.size(); ++o) {
                if (!run.rows[o].complete) continue;
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
    if (comparable > 1)
        out +=
            run.complete()
                ? "\nBold marks the best optimizer at each step.\n"
                : fmt::format("\nBold marks the best at each step among the optimizers that completed the {} steps.\n",
                              with_thousands(p.steps));
    return out;
}

}  // namespace

void register_report_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("report",
                                   "Print the paper's Table 1, per-evaluation perplexity (Appendix C) and, after skew "
                                   "eval, Table 9 for a run, as Markdown");
    auto run_dir = std::make_shared<std::string>();
    cmd->add_option("RUNDIR", *run_dir, "Run folder holding metrics_<optimizer>.json (skew train --out)")->required();
    cmd->callback([run_dir] { std::cout << render(load_run(*run_dir)) << render_table9(*run_dir) << std::flush; });
}

}  // namespace skew::tools
