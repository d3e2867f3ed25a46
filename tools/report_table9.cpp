// The paper's Table 9 (Appendix D: zero-shot PIQA, WinoGrande, HellaSwag, ARC-Challenge) for
// `skew report`, from the eval_<optimizer>.json files `skew eval` writes (docs/evaluation.md).
#include "tools/report_table9.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "checkpoint/run_folder.h"

namespace skew::tools {

std::string render_table9(const std::string& run_dir) {
    namespace fs = std::filesystem;
    std::vector<std::pair<fs::path, std::string>> files;  // eval_<optimizer>.json, optimizer
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_dir, ec))
        if (const auto opt = RunFolder::eval_results_optimizer(e.path().filename().string()))
            files.emplace_back(e.path(), *opt);
    if (files.empty()) return "";
    std::sort(files.begin(), files.end());
    struct Column {
        const char* task;
        const char* title;
        const char* metric;
    };
    const Column cols[] = {{"piqa", "PIQA (acc)", "acc"},
                           {"winogrande", "WinoGrande (acc)", "acc"},
                           {"hellaswag", "HellaSwag (acc_norm)", "acc_norm"},
                           {"arc", "ARC-C (acc_norm)", "acc_norm"}};
    std::string out = "\n## Zero-shot accuracy (Appendix D, Table 9)\n\n| Optimizer |";
    for (const Column& c : cols) out += fmt::format(" {} |", c.title);
    out += " Checkpoint |\n| --- | ---: | ---: | ---: | ---: | --- |\n";
    for (const auto& [f, opt] : files) {
        std::ifstream in(f);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            out += fmt::format("| {} | {} is not valid JSON | | | | |\n", opt, f.filename().string());
            continue;
        }
        out += fmt::format("| {} |", opt);
        for (const Column& c : cols) {
            const nlohmann::json* t =
                j.contains("tasks") && j["tasks"].contains(c.task) ? &j["tasks"][c.task] : nullptr;
            const std::string se = std::string(c.metric) + "_stderr";
            if (t && t->contains(c.metric) && (*t)[c.metric].is_number() && t->contains(se) && (*t)[se].is_number())
                out += fmt::format(" {:.4f} ± {:.4f} |", (*t)[c.metric].get<double>(), (*t)[se].get<double>());
            else out += " — |";
        }
        const auto field = [&](const char* key) { return j.contains(key) ? j[key].dump() : std::string("?"); };
        const std::string which =
            j.contains("which") && j["which"].is_string() ? j["which"].get<std::string>() : field("which");
        out += fmt::format(" {}, step {} |\n", which, field("step"));
    }
    out +=
        "\nZero-shot, scored as the LM Evaluation Harness v0.4 scores these tasks (`skew eval`, docs/evaluation.md); "
        "± is the standard error of the mean. The paper's SkewAdam checkpoint: PIQA 0.5468, WinoGrande 0.4933, "
        "HellaSwag 0.2543, ARC-C 0.2159 (chance: 0.50, 0.50, 0.25, about 0.25).\n";
    return out;
}

}  // namespace skew::tools
