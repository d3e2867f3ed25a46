// Generation speed of `skew sample`'s KV-cache path (model/inference.h): prefill of a prompt, then
// greedy decode one token at a time to the model's last position. Prints JSON (tokens/s of decode,
// overall and for the first and last quarter of the positions, prefill ms), tagged with the commit.
// Weights are model_init's (speed does not depend on them: one token always visits top_k experts).
//
// Usage: bench_decode [--config configs/quickstart.yaml] [--backend cpu|cuda] [--prompt-tokens 16]
//                     [--repeats 3] [--threads N] [--out FILE]
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/config.h"
#include "engine/error.h"
#include "model/inference.h"
#include "model/model.h"
#include "runtime/backend_registry.h"
#include "runtime/session.h"

using namespace skew;
using Clock = std::chrono::steady_clock;

namespace {
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int32_t argmax(const std::vector<float>& logits, int64_t V) {
    return int32_t(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
}
}  // namespace

int main(int argc, char** argv) try {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    std::string config = "configs/quickstart.yaml", backend_name = "cpu", out;
    int64_t prompt_tokens = 16, repeats = 3, threads = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc) config = argv[++i];
        else if (a == "--backend" && i + 1 < argc) backend_name = argv[++i];
        else if (a == "--prompt-tokens" && i + 1 < argc) prompt_tokens = std::atoll(argv[++i]);
        else if (a == "--repeats" && i + 1 < argc) repeats = std::atoll(argv[++i]);
        else if (a == "--threads" && i + 1 < argc) threads = std::atoll(argv[++i]);
        else if (a == "--out" && i + 1 < argc) out = argv[++i];
        else fail("bench_decode: unknown argument '{}'", a);
    }
    if (threads > 0) omp_set_num_threads(int(threads));
    Config cfg = load_config(config, {"runtime.backend=" + backend_name, "train.batch_size=1", "train.microbatch=1",
                                      "train.seq_len=1"});
    std::unique_ptr<Backend> be = make_named_backend(backend_name);
    SessionSpec spec;
    spec.kind = SessionKind::INFERENCE;  // AdamW's plan without its state, one sequence
    const std::unique_ptr<Session> session = open_session(cfg, *be, spec);
    Model& m = session->model;
    model_init(m, 42);
    const int64_t L = cfg.model.max_seq_len, V = cfg.model.vocab_size;
    if (prompt_tokens < 1 || prompt_tokens >= L) fail("--prompt-tokens {}: must be in [1, {})", prompt_tokens, L);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
    for (int64_t i = 0; i < prompt_tokens; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % V);

    KvCache kc = open_kv_cache(m, L);
    double best_decode = 1e300, best_prefill = 1e300, best_first = 1e300, best_last = 1e300;
    const int64_t steps = L - prompt_tokens, quarter = std::max<int64_t>(1, steps / 4);
    for (int64_t r = 0; r < repeats; ++r) {
        kc.length = 0;
        auto t0 = Clock::now();
        std::vector<float> logits = kv_cache_forward(m, kc, prompt);
        auto t1 = Clock::now();
        std::vector<double> step_s;
        for (int64_t s = 0; s < steps; ++s) {
            const int32_t next = argmax(logits, V);
            auto a = Clock::now();
            logits = kv_cache_forward(m, kc, std::span<const int32_t>(&next, 1));  // copies the logits out: synchronizes
            step_s.push_back(seconds(a, Clock::now()));
        }
        double total = 0, first = 0, last = 0;
        for (size_t s = 0; s < step_s.size(); ++s) {
            total += step_s[s];
            if (int64_t(s) < quarter) first += step_s[s];
            if (int64_t(s) >= steps - quarter) last += step_s[s];
        }
        best_decode = std::min(best_decode, total);
        best_first = std::min(best_first, first);
        best_last = std::min(best_last, last);
        best_prefill = std::min(best_prefill, seconds(t0, t1));
    }
    nlohmann::json j;
    j["bench"] = "decode";
    j["config"] = config;
    j["backend"] = be->name();
    j["threads"] = be->device_memory() ? 0 : omp_get_max_threads();
    j["params"] = session->table.total_numel();
    j["max_seq_len"] = L;
    j["prompt_tokens"] = prompt_tokens;
    j["decode_steps"] = steps;
    j["repeats"] = repeats;
    j["prefill_ms"] = best_prefill * 1e3;
    j["decode_tokens_per_sec"] = double(steps) / best_decode;
    j["decode_ms_per_token"] = best_decode / double(steps) * 1e3;
    j["decode_tokens_per_sec_first_quarter"] = double(quarter) / best_first;
    j["decode_tokens_per_sec_last_quarter"] = double(quarter) / best_last;
    bench::add_provenance(j, "model eval kernels bench");
    bench::emit_result(j, out);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: error: %s\n", e.what());
    return 1;
}
