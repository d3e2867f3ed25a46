// Generation speed of `skew sample`'s KV-cache path (model/inference.h): prefill of a prompt, then
// greedy decode one token at a time to the model's last position. Prints JSON (tokens/s of decode,
// overall and for the first and last quarter of the positions, prefill ms), tagged with the commit.
// With --positions P1,P2,..: for each P, a cache of P positions is prefilled with P - S tokens and
// S = --decode-steps tokens are decoded at positions P - S .. P - 1 (tokens/s of a step with about P
// cached positions); model.max_seq_len is raised to the largest P (learned positions: a longer table).
// Weights are model_init's (speed does not depend on them: one token always visits top_k experts).
//
// Usage: bench_decode [--config configs/quickstart.yaml] [--backend cpu|cuda] [--prompt-tokens 16]
//                     [--positions 128,1024,4096] [--decode-steps 16]
//                     [--repeats 3] [--threads N] [--out FILE]
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

// A comma-separated list of positive integers (--positions).
std::vector<int64_t> int_list(const std::string& flag, const std::string& text) {
    std::vector<int64_t> out;
    size_t i = 0;
    while (i <= text.size()) {
        const size_t j = std::min(text.find(',', i), text.size());
        const std::string item = text.substr(i, j - i);
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || v < 1)
            fail("{} {}: expected positive integers separated by commas", flag, text);
        out.push_back(v);
        i = j + 1;
    }
    return out;
}

// Prefill of `prompt`, then greedy decode of `steps` tokens, `repeats` times: the seconds of the
// prefill and of the decode steps together, each the fastest run's.
struct DecodeRun {
    double prefill_s = 1e300, decode_s = 1e300;
};

DecodeRun time_decode(Model& m, KvCache& kc, const std::vector<int32_t>& prompt, int64_t steps, int64_t repeats) {
    DecodeRun best;
    const int64_t V = m.cfg->model.vocab_size;
    for (int64_t r = 0; r < repeats; ++r) {
        kc.length = 0;
        const auto t0 = Clock::now();
        std::vector<float> logits = kv_cache_forward(m, kc, prompt);
        const auto t1 = Clock::now();
        for (int64_t s = 0; s < steps; ++s) {
            const int32_t next = argmax(logits, V);
            logits =
                kv_cache_forward(m, kc, std::span<const int32_t>(&next, 1));  // copies the logits out: synchronizes
        }
        best.prefill_s = std::min(best.prefill_s, seconds(t0, t1));
        best.decode_s = std::min(best.decode_s, seconds(t1, Clock::now()));
    }
    return best;
}

std::vector<int32_t> prompt_tokens_of(int64_t n, int64_t V) {
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % V);
    return prompt;
}
}  // namespace

int main(int argc, char** argv) try {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    std::string config = "configs/quickstart.yaml", backend_name = "cpu", out;
    int64_t prompt_tokens = 16, repeats = 3, threads = 0, decode_steps = 16;
    std::vector<int64_t> positions;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc) config = argv[++i];
        else if (a == "--backend" && i + 1 < argc) backend_name = argv[++i];
        else if (a == "--prompt-tokens" && i + 1 < argc) prompt_tokens = std::atoll(argv[++i]);
        else if (a == "--repeats" && i + 1 < argc) repeats = std::atoll(argv[++i]);
        else if (a == "--threads" && i + 1 < argc) threads = std::atoll(argv[++i]);
        else if (a == "--positions" && i + 1 < argc) positions = int_list(a, argv[++i]);
        else if (a == "--decode-steps" && i + 1 < argc) decode_steps = std::atoll(argv[++i]);
        else if (a == "--out" && i + 1 < argc) out = argv[++i];
        else fail("bench_decode: unknown argument '{}'", a);
    }
    if (threads > 0) omp_set_num_threads(int(threads));
    std::vector<std::string> overrides{"runtime.backend=" + backend_name, "train.batch_size=1", "train.microbatch=1",
                                       "train.seq_len=1"};
    if (!positions.empty()) {  // the model's positions reach the longest cache; op scratch fits its prefill
        const int64_t longest = *std::max_element(positions.begin(), positions.end());
        if (decode_steps < 1) fail("--decode-steps {}: must be >= 1", decode_steps);
        for (int64_t p : positions)
            if (p <= decode_steps) fail("--positions {}: must exceed --decode-steps {}", p, decode_steps);
        overrides.back() = "train.seq_len=" + std::to_string(longest);
        if (longest > load_config(config).model.max_seq_len)
            overrides.push_back("model.max_seq_len=" + std::to_string(longest));
    }
    Config cfg = load_config(config, overrides);
    std::unique_ptr<Backend> be = make_named_backend(backend_name);
    SessionSpec spec;
    spec.kind = SessionKind::INFERENCE;  // AdamW's plan without its state, one sequence
    const std::unique_ptr<Session> session = open_session(cfg, *be, spec);
    Model& m = session->model;
    model_init(m, 42);
    const int64_t L = cfg.model.max_seq_len, V = cfg.model.vocab_size;
    nlohmann::json j;
    j["bench"] = "decode";
    j["config"] = config;
    j["backend"] = be->name();
    j["threads"] = be->device_memory() ? 0 : omp_get_max_threads();
    j["params"] = session->table.total_numel();
    j["max_seq_len"] = L;
    j["repeats"] = repeats;
    if (!positions.empty()) {
        j["decode_steps"] = decode_steps;
        j["positions"] = nlohmann::json::array();
        for (int64_t p : positions) {
            KvCache kc = open_kv_cache(m, p);
            const DecodeRun run = time_decode(m, kc, prompt_tokens_of(p - decode_steps, V), decode_steps, repeats);
            j["positions"].push_back({{"positions", p},
                                      {"prefill_tokens", p - decode_steps},
                                      {"prefill_ms", run.prefill_s * 1e3},
                                      {"decode_tokens_per_sec", double(decode_steps) / run.decode_s},
                                      {"decode_ms_per_token", run.decode_s / double(decode_steps) * 1e3}});
            std::fprintf(stderr, "bench_decode: %lld positions: %.1f tokens/s\n", (long long)p,
                         double(decode_steps) / run.decode_s);
        }
        bench::add_provenance(j, "model eval kernels bench");
        bench::emit_result(j, out);
        return 0;
    }
    if (prompt_tokens < 1 || prompt_tokens >= L) fail("--prompt-tokens {}: must be in [1, {})", prompt_tokens, L);
    const std::vector<int32_t> prompt = prompt_tokens_of(prompt_tokens, V);

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
            logits =
                kv_cache_forward(m, kc, std::span<const int32_t>(&next, 1));  // copies the logits out: synchronizes
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
    j["prompt_tokens"] = prompt_tokens;
    j["decode_steps"] = steps;
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
