// --list and --mode support (tests/backend_ops/listing.h).
#include "tests/backend_ops/listing.h"

#include <cstdio>
#include <map>
#include <set>

namespace skew::ops {

void run_list(const ModeOptions& o, nlohmann::json& rows) {
    std::vector<TableOptions> lists(1);
    lists[0].large = true;  // listed with "[large]" in the shape
    for (const auto& set : perf_shape_sets()) {
        TableOptions to;
        to.perf = true;
        to.cpu_scaled = false;
        to.shape_set = set;
        lists.push_back(to);
    }
    for (const TableOptions& to : lists) {
        const bool perf = to.perf;
        for (const Case& c : all_cases(to)) {
            if (!o.filter.empty() && c.op.find(o.filter) == std::string::npos) continue;
            nlohmann::json lim = nlohmann::json::array();
            std::string lims;
            for (const auto& t : c.t)
                if (t.out) {
                    lim.push_back({{"output", t.name}, {"nmse", t.tol.nmse}, {"atol", t.tol.atol}, {"why", t.tol.why}});
                    char buf[96];
                    std::snprintf(buf, sizeof buf, " %s<=%.2g/%.2g", t.name.c_str(), t.tol.nmse, t.tol.atol);
                    lims += buf;
                }
            if (o.json)
                rows.push_back({{"op", c.op},
                                {"shape", c.shape},
                                {"dtypes", c.dtypes},
                                {"mode", perf ? "perf" : "test"},
                                {"flops", c.flops},
                                {"bytes", c.bytes},
                                {"limits", lim}});
            else
                std::printf("%-5s %-24s %-60s %-18s %10.3g FLOP %10.3g B%s\n", perf ? "perf" : "test", c.op.c_str(),
                            c.shape.c_str(), c.dtypes.c_str(), c.flops, c.bytes, perf ? "" : lims.c_str());
        }
    }
    if (o.filter.empty())
        for (const GradCase& g : all_grad_cases()) {
            if (o.json) rows.push_back({{"op", g.op}, {"shape", g.shape}, {"mode", "grad"}, {"inputs", g.in.size()}});
            else
                std::printf("grad  %-24s %-60s %zu inputs by central differences\n", g.op.c_str(), g.shape.c_str(),
                            g.in.size());
        }
}

void run_support_mode(std::vector<BackendEntry>& backends, const ModeOptions& o, nlohmann::json& rows) {
    const auto names = compiled_backends();
    std::vector<std::pair<std::string, std::string>> keys;  // (op, dtypes) in table order
    std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>> cell;
    for (const Case& c : all_cases(TableOptions{})) {
        if (!o.filter.empty() && c.op.find(o.filter) == std::string::npos) continue;
        if (c.expect_error) continue;  // an argument check (e.g. a head_dim CUDA refuses), not a combination run
        const auto key = std::make_pair(c.op, c.dtypes);
        if (!cell.count(key)) keys.push_back(key);
        for (const auto& n : names) {
            bool present = false;
            for (auto& b : backends) present = present || b.name == n;
            const bool yes = !c.supports || c.supports(traits_named(n));
            std::string& v = cell[key][n];
            // one case of the (op, dtypes) pair refused makes the cell "partly" (e.g. a head_dim)
            const std::string now = yes ? "yes" : "no";
            v = v.empty() ? now : (v.rfind(now, 0) == 0 ? v : "partly");
            if (!present && v.find("(not run here") == std::string::npos)
                v += " (not run here: " + backend_absent_reason(n) + ")";
        }
    }
    if (!o.json) {
        std::printf("| op | dtypes |");
        for (const auto& n : names) std::printf(" %s |", n.c_str());
        std::printf("\n| --- | --- |");
        for (size_t i = 0; i < names.size(); ++i) std::printf(" --- |");
        std::printf("\n");
    }
    for (const auto& k : keys) {
        nlohmann::json r{{"op", k.first}, {"dtypes", k.second}};
        if (!o.json) std::printf("| %s | %s |", k.first.c_str(), k.second.c_str());
        for (const auto& n : names) {
            r[n] = cell[k][n];
            if (!o.json) std::printf(" %s |", cell[k][n].c_str());
        }
        if (o.json) rows.push_back(r);
        else std::printf("\n");
    }
}

}  // namespace skew::ops
