// Optimizer step benchmark on the CPU: step time per parameter for every
// built-in optimizer on a small representative parameter set, the bytes each step moves per
// parameter, and the state size of each optimizer for the paper's model (from the memory plan).
// Usage: bench_optim [--reps N] [--scale S] [--out FILE]; prints JSON tagged with the git commit.
#include <nlohmann/json.hpp>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/common/bf16.h"
#include "kernels/common/philox.h"
#include "optim/optimizer.h"
#include "plan/plan.h"
#include "tests/optim/optim_test_util.h"

using namespace skew;

using skew::bench::shell;

using skew::test::make_param;

int main(int argc, char** argv) {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    int reps = 5;
    int64_t scale = 1;  // multiplies d (1: d = 1024)
    std::string out_path;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
        else if (a == "--scale" && i + 1 < argc) scale = std::atoll(argv[++i]);
        else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_optim [--reps N] [--scale S] [--out FILE]\n");
            return 2;
        }
    }
    if (reps < 1 || scale < 1) {
        std::fprintf(stderr, "bench_optim: --reps and --scale must be positive integers\n");
        return 2;
    }
    const int64_t d = 1024 * scale;
    // A backbone matrix, an expert stack, the router and two norm vectors: the paper's tiers in miniature.
    std::deque<ParamInfo> infos;
    infos.push_back(make_param("blocks.0.attn.q", {d, d}, DType::BF16, Tier::BACKBONE, Role::ATTN_Q, 0));
    infos.push_back(make_param("blocks.0.ln1.weight", {d}, DType::F32, Tier::BACKBONE, Role::NORM_WEIGHT, 1));
    infos.push_back(make_param("blocks.0.ln1.bias", {d}, DType::F32, Tier::BACKBONE, Role::NORM_BIAS, 2));
    infos.push_back(make_param("blocks.1.moe.router", {128, d}, DType::F32, Tier::ROUTER, Role::ROUTER, 3));
    infos.push_back(
        make_param("blocks.1.moe.experts.w1", {8, d / 2, d}, DType::BF16, Tier::EXPERTS, Role::EXPERT_W1, 4));
    int64_t total = 0;
    for (const auto& p : infos) total += p.numel();

    std::vector<std::vector<uint16_t>> w16(infos.size());
    std::vector<std::vector<float>> w32(infos.size()), g32(infos.size());
    std::vector<std::vector<uint16_t>> g16(infos.size());
    for (size_t t = 0; t < infos.size(); ++t) {
        const int64_t n = infos[t].numel();
        if (infos[t].dtype == DType::BF16) {
            w16[t].resize(size_t(n));
            g16[t].resize(size_t(n));
            for (int64_t i = 0; i < n; ++i) {
                w16[t][size_t(i)] =
                    f32_to_bf16(philox_normal(PhiloxKey{1, 1}, 0, uint32_t(t), uint64_t(i)) * 0.02f).bits;
                g16[t][size_t(i)] =
                    f32_to_bf16(philox_normal(PhiloxKey{2, 1}, 0, uint32_t(t), uint64_t(i)) * 1e-3f).bits;
            }
        } else {
            w32[t].resize(size_t(n));
            g32[t].resize(size_t(n));
            for (int64_t i = 0; i < n; ++i) {
                w32[t][size_t(i)] = 1.0f;
                g32[t][size_t(i)] = philox_normal(PhiloxKey{2, 1}, 0, uint32_t(t), uint64_t(i)) * 1e-3f;
            }
        }
    }

    ParamTable paper = build_param_table(ModelConfig{});
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& name : builtin_optimizer_names()) {
        OptimizerConfig opt = builtin_optimizer(name);
        std::vector<ParamSlot> slots;
        for (size_t t = 0; t < infos.size(); ++t) {
            ParamSlot s;
            s.info = &infos[t];
            const bool bf = infos[t].dtype == DType::BF16;
            s.weight = bf ? static_cast<void*>(w16[t].data()) : static_cast<void*>(w32[t].data());
            s.grad = bf ? static_cast<const void*>(g16[t].data()) : static_cast<const void*>(g32[t].data());
            s.grad_dtype = bf ? DType::BF16 : DType::F32;
            slots.push_back(s);
        }
        HostOptimState state;
        allocate_host_state(opt, slots, state);
        optimizer_step(opt, slots, OptimStep{1, opt.lr, 42});  // warm-up (GaLore: the projection's SVD)
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) optimizer_step(opt, slots, OptimStep{2 + r, opt.lr, 42});
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        double bytes = 0;  // bytes moved per step over the bench set
        for (size_t t = 0; t < infos.size(); ++t)
            bytes += optimizer_bytes_per_param(opt, infos[t], slots[t].grad_dtype) * double(infos[t].numel());
        double paper_bytes = 0;  // weighted over the paper's model, bf16 grads for bf16 weights
        for (const ParamInfo& p : paper.params)
            paper_bytes += optimizer_bytes_per_param(opt, p, p.dtype) * double(p.numel());
        int64_t state_bytes = optimizer_state_bytes(opt, paper);
        nlohmann::json row;
        row["optimizer"] = name;
        row["type"] = choice_name(opt.type);
        row["step_seconds"] = sec;
        row["ns_per_param"] = sec * 1e9 / double(total);
        row["bytes_per_param"] = bytes / double(total);
        row["paper_model_bytes_per_param"] = paper_bytes / double(paper.total_numel());
        row["effective_gb_per_s"] = bytes / sec / 1e9;
        row["paper_state_gib"] = double(state_bytes) / GIB;
        row["paper_state_gib_plan"] = [&] {
            int64_t b = 0;
            for (const BufferSpec& s : optimizer_state_buffers(opt, paper)) b += s.bytes();
            return double(b) / GIB;
        }();
        rows.push_back(row);
        std::fprintf(stderr, "%-26s %8.2f ns/param %6.2f B/param (paper model %5.2f) state %6.2f GiB\n", name.c_str(),
                     sec * 1e9 / double(total), bytes / double(total), paper_bytes / double(paper.total_numel()),
                     double(state_bytes) / GIB);
    }
    nlohmann::json result;
    result["bench"] = "optim";
    result["backend"] = "cpu";
    skew::bench::add_provenance(result, "optim kernels/common bench");
    result["threads"] = omp_get_max_threads();
    result["params"] = total;
    result["reps"] = reps;
    result["d"] = d;
    result["optimizers"] = rows;
    skew::bench::emit_result(result, out_path);
    return 0;
}
