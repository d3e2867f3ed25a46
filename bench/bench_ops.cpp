// CPU op benchmark: the op table's perf rows (tests/backend_ops, docs/backend-ops.md) on the CPU
// backend at a named shape set: by default moe10m, one microbatch of bench_step's model (8 x 128
// tokens, d_model 128, 4/2 heads of 32, 8 experts of 1024 top-2, GPT-2's vocabulary padded to
// 50,304), or the paper's (scaled: 1 x 128 tokens, 8 experts). Every Backend op forward and
// backward, the CPU LM head's three tile products, and the copy rate at the set's working sets,
// each with its time, GFLOP/s, GB/s and fraction of the roofline measured in the same run (OpenBLAS
// sgemm 2048^3 on every thread, a 256 MiB memcpy). Not a test. Writes JSON with the commit and the
// OpenBLAS core (bench/bench_util.h).
// Usage: bench_ops [--shapes moe10m|paper|moe10m,paper] [--min-seconds S] [--filter OP] [--out FILE]
#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "tests/backend_ops/op_table.h"
#include "tests/backend_ops/perf.h"

int main(int argc, char** argv) {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    skew::ops::ModeOptions o;
    skew::ops::PerfOptions p;
    p.shape_set = "moe10m";
    p.min_seconds = 0.5;
    std::string out_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--shapes" && i + 1 < argc) p.shape_set = argv[++i];
        else if (a == "--min-seconds" && i + 1 < argc) p.min_seconds = std::stod(argv[++i]);
        else if (a == "--filter" && i + 1 < argc) o.filter = argv[++i];
        else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
        else {
            std::fprintf(stderr,
                         "usage: bench_ops [--shapes moe10m|paper] [--min-seconds S] [--filter OP] [--out FILE]\n");
            return 2;
        }
    }
    try {
        auto backends = skew::ops::present_backends();
        backends.resize(1);  // the CPU
        nlohmann::json rows = nlohmann::json::array();
        const int failures = skew::ops::run_perf_mode(backends, o, p, rows);
        nlohmann::json result;
        result["bench"] = "ops";
        result["backend"] = "cpu";
        skew::bench::add_provenance(result, "kernels bench tests/backend_ops");
        result["threads"] = omp_get_max_threads();
        result["shape_set"] = p.shape_set;
        nlohmann::json shapes = nlohmann::json::object();  // each set's dimensions
        for (size_t at = 0; at <= p.shape_set.size();) {
            const size_t end = std::min(p.shape_set.find(',', at), p.shape_set.size());
            skew::ops::TableOptions to;
            to.perf = true;
            to.shape_set = p.shape_set.substr(at, end - at);
            const skew::ops::PerfDims d = skew::ops::perf_dims(to);
            shapes[d.set] = {{"batch", d.batch},
                             {"seq_len", d.seq_len},
                             {"d_model", d.d_model},
                             {"n_heads", d.n_heads},
                             {"n_kv_heads", d.n_kv_heads},
                             {"head_dim", d.head_dim},
                             {"n_experts", d.n_experts},
                             {"top_k", d.top_k},
                             {"d_ff", d.d_ff},
                             {"vocab", d.vocab},
                             {"padded_vocab", d.padded_vocab},
                             {"scaled", d.scaled}};
            at = end + 1;
        }
        result["shapes"] = shapes;
        result["min_seconds"] = p.min_seconds;
        nlohmann::json ops = nlohmann::json::array();
        for (const auto& r : rows) {
            if (r.contains("op")) ops.push_back(r);
            else result["roofline"] = r;
        }
        result["ops"] = ops;
        result["failures"] = failures;
        skew::bench::emit_result(result, out_path);
        return failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_ops: %s\n", e.what());
        return 2;
    }
}
