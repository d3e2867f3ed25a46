// --mode coverage (tests/backend_ops/coverage.h).
#include "tests/backend_ops/coverage.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "engine/error.h"
#include "tests/backend_ops/op_table.h"

namespace skew::ops {

std::vector<std::string> parse_virtual_methods(const std::string& text) {
    // Comments out first (a doc comment may say "virtual ... (").
    const std::string code = std::regex_replace(text, std::regex(R"(//[^\n]*)"), "");
    std::vector<std::string> out;
    const std::regex decl(R"(\bvirtual\s+[^;{}()]*?\b([A-Za-z_]\w*)\s*\()");
    for (auto it = std::sregex_iterator(code.begin(), code.end(), decl); it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1];
        if (name == "Backend") continue;  // ~Backend
        if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
    return out;
}

const std::vector<std::string>& non_op_members() {
    static const std::vector<std::string> v{
        "name",           // a label
        "device_memory",  // capability queries
        "runs_cuda",
        "cuda_stream",
        "matmul_widens_bf16_weights",
        "matmul_row_granularity",
        "bind_workspace",  // memory management
        "device_memory_used_bytes",
        "device_memory_free_bytes",
        "allocate_device_memory",
        "free_device_memory",
        "lm_head_workspace_bytes",  // a size query (every lm_head_cross_entropy row calls it)
    };
    return v;
}

int run_coverage_mode(const std::string& source_dir) {
    const std::string path = source_dir + "/kernels/backend.h";
    std::ifstream f(path);
    if (!f) fail("backend_ops --mode coverage: cannot read {} (pass --source, the repository root)", path);
    std::stringstream ss;
    ss << f.rdbuf();
    const auto methods = parse_virtual_methods(ss.str());
    std::set<std::string> covered;
    for (const Case& c : all_cases(TableOptions{}))
        for (const auto& m : c.covers) covered.insert(m);
    for (const GradCase& g : all_grad_cases()) covered.insert(g.op);
    const auto& skip = non_op_members();
    int problems = 0, ops = 0;
    for (const auto& m : methods) {
        if (std::find(skip.begin(), skip.end(), m) != skip.end()) continue;
        ++ops;
        if (!covered.count(m)) {
            std::printf("FAIL %s (declared in kernels/backend.h) has no row in tests/backend_ops\n", m.c_str());
            ++problems;
        }
    }
    for (const auto& m : covered)
        if (std::find(methods.begin(), methods.end(), m) == methods.end()) {
            std::printf("FAIL the table has a row for %s, which kernels/backend.h does not declare\n", m.c_str());
            ++problems;
        }
    for (const auto& s : skip)
        if (std::find(methods.begin(), methods.end(), s) == methods.end()) {
            std::printf("FAIL the non-op list names %s, which kernels/backend.h no longer declares\n", s.c_str());
            ++problems;
        }
    if (ops < 20) {
        std::printf("FAIL parsed only %d ops from %s: the parser no longer reads the header\n", ops, path.c_str());
        ++problems;
    }
    std::printf("%s: %d ops declared in kernels/backend.h (%zu virtual members, %zu not ops), %d without a row\n",
                problems ? "FAIL" : "ok", ops, methods.size(), skip.size(), problems);
    return problems;
}

}  // namespace skew::ops
