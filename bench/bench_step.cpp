// One training step of the MoE transformer on the CPU backend: zero
// gradients, forward + backward over every microbatch (activation recompute per train.recompute,
// aux losses), global grad-norm clip; no optimizer. Prints tokens/s and peak RSS as JSON, tagged
// with the git commit: one line per --recompute mode (the plan's activation bytes and arena with
// it; peak RSS is the process's so far, so a later mode's includes the earlier ones' peaks).
//
// Usage: bench_step [--model tiny|moe10m] [--steps N] [--threads N] [--tiny-config configs/tiny.yaml]
//                   [--recompute block|attention|none[,...]]   (default block; e.g. block,none)
//        bench_step --blas-core   prints the OpenBLAS core it runs (kernels/cpu/process_env.h) and exits
//   tiny:   configs/tiny.yaml (d_model 64, 8 experts, 50,304 vocab, batch 8 x 32 in 2 microbatches)
//   moe10m: d_model 128, 2 blocks (dense, MoE of 8 experts, d_ff = d_expert = 1024), GQA 4/2,
//           50,304 vocab, batch 8 x 128 in one microbatch (~10.1M parameters)
// The PyTorch twin is bench/torch_step.py; its --compare runs both side by side on one OpenBLAS core.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/config.h"
#include "engine/error.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "runtime/session.h"

using namespace skew;

namespace {

const char* MOE10M_YAML = R"(
model:
  d_model: 128
  n_blocks: 2
  moe_blocks: [1]
  n_heads: 4
  n_kv_heads: 2
  d_ff: 1024
  max_seq_len: 128
  n_experts: 8
  d_expert: 1024
  top_k: 2
train:
  batch_size: 8
  seq_len: 128
  microbatch: 8
runtime:
  backend: cpu
  threads: 2
  workspace_gib: 0
)";

using skew::bench::git_commit;

double peak_rss_mib() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return double(ru.ru_maxrss) / 1024.0;  // Linux: KiB
}

}  // namespace

int main(int argc, char** argv) {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    std::string model_name = "moe10m";
    std::string tiny_path = "configs/tiny.yaml";  // run from the repository root
    int steps = 3, threads = 2;
    std::vector<std::string> modes = {"block"};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--blas-core") {
            std::printf("%s\n", cpu::blas_core_name().c_str());
            return 0;
        }
        if (a == "--model" && i + 1 < argc) model_name = argv[++i];
        else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
        else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
        else if (a == "--tiny-config" && i + 1 < argc) tiny_path = argv[++i];
        else if (a == "--recompute" && i + 1 < argc) {
            modes.clear();
            std::string list = argv[++i];
            for (size_t p = 0; p <= list.size();) {
                const size_t q = std::min(list.find(',', p), list.size());
                modes.push_back(list.substr(p, q - p));
                p = q + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: bench_step [--model tiny|moe10m] [--steps N] [--threads N] [--tiny-config PATH] "
                         "[--recompute block|attention|none[,...]] | --blas-core\n");
            return 2;
        }
    }
    try {
        for (const std::string& mode : modes) {
            Config cfg = model_name == "tiny" ? load_config(tiny_path, {"train.recompute=" + mode})
                                              : load_config_text(MOE10M_YAML, "moe10m", {"train.recompute=" + mode});
            omp_set_num_threads(threads);
            const int64_t mb = cfg.train.microbatch, accum = cfg.train.grad_accum_steps();
            auto backend = make_cpu_backend();
            const OptimizerConfig skewadam = builtin_optimizer("skewadam");
            SessionSpec spec;
            spec.optimizer = &skewadam;
            spec.microbatch = mb;
            const std::unique_ptr<Session> session = open_session(cfg, *backend, spec);
            Model& m = session->model;
            model_init(m, uint64_t(cfg.train.seed));
            const int64_t T = cfg.train.seq_len, B = cfg.train.batch_size, V = cfg.model.vocab_size;
            std::vector<int32_t> stream(size_t(B * T + 1));
            uint64_t s = 12345;
            for (auto& x : stream) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                x = int32_t((s >> 33) % uint64_t(V));
            }
            double loss = 0.0;
            auto step_once = [&](uint32_t step) {
                model_zero_grads(m);
                loss = 0.0;
                for (int64_t i = 0; i < accum; ++i) {
                    const int32_t* x = stream.data() + i * mb * T;
                    loss += model_forward_backward(m, x, x + 1, i, step, accum, true).total / double(accum);
                }
                model_clip_gradients(m, cfg.train.grad_clip);
            };
            step_once(0);  // warm-up
            std::vector<double> secs;
            for (int k = 0; k < steps; ++k) {
                const auto t0 = std::chrono::steady_clock::now();
                step_once(uint32_t(k + 1));
                secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
            std::sort(secs.begin(), secs.end());
            const double med = secs[secs.size() / 2];
            nlohmann::json j;
            j["bench"] = "step";
            j["impl"] = "skew-cpu";
            j["model"] = model_name;
            j["recompute"] = choice_name(cfg.train.recompute);
            j["commit"] = git_commit();
            skew::bench::add_blas_core(j);
            j["params"] = session->table.total_numel();
            j["batch"] = {{"sequences", B}, {"seq_len", T}, {"microbatch", mb}, {"accum_steps", accum}};
            j["threads"] = threads;
            j["steps_timed"] = steps;
            j["step_seconds_median"] = med;
            j["step_seconds"] = secs;
            j["tokens_per_s"] = double(B * T) / med;
            j["peak_rss_mib"] = peak_rss_mib();
            j["arena_mib"] = double(session->plan.peak_bytes) / MIB;
            j["activation_mib"] = double(session->plan.activation_bytes) / MIB;
            j["loss"] = loss;
            std::printf("%s\n", j.dump().c_str());
            std::fflush(stdout);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_step: %s\n", e.what());
        return 1;
    }
    return 0;
}
