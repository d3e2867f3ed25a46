// skew sample CHECKPOINT_OR_RUN: generate text from a trained checkpoint (docs/evaluation.md,
// "skew sample"): the prompt is prefilled into a KV cache, then tokens are drawn one at a time
// (temperature, top-k, top-p, seed) and streamed to stdout until the end-of-text token, --max-tokens or the
// model's positions run out.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "checkpoint/run_folder.h"
#include "data/tokenizer.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/json_strict.h"
#include "eval/load.h"
#include "eval/sampling.h"
#include "model/inference.h"
#include "runtime/session.h"
#include "tools/cli_checks.h"
#include "tools/commands.h"
#include "tools/log_output.h"

namespace skew::tools {
namespace {

using nlohmann::json;

struct SampleArgs {
    std::string path;
    std::string optimizer;
    std::string which;
    std::string prompt;
    bool prompt_given = false;
    int64_t max_tokens = 128;
    double temperature = 1.0;
    int64_t top_k = 0;
    double top_p = 1.0;
    uint64_t seed = 0;
    int64_t num_samples = 1;
    std::string tokenizer_dir;
    std::string backend = "auto";
    bool json_out = false;
};

void run_sample(const SampleArgs& a) {
    log_to(stderr);  // stdout carries the results (--json) or the generated text
    if (a.max_tokens < 1) fail("--max-tokens {}: must be >= 1", a.max_tokens);
    if (a.num_samples < 1) fail("--num-samples {}: must be >= 1", a.num_samples);
    eval::SamplingOptions so{a.temperature, a.top_k, a.top_p, a.seed};
    eval::sampling_distribution(std::vector<float>{0.0f}, 1, so);  // validates the options before loading
    const eval::CheckpointRef ref = eval::resolve_checkpoint(a.path, a.optimizer, a.which);
    const Config run_cfg = load_config(RunFolder{ref.run_dir}.config());
    const data::Tokenizer tok = eval::load_run_tokenizer(ref, run_cfg, a.tokenizer_dir);
    std::string prompt = a.prompt;
    if (!a.prompt_given) {  // standard input, without the one newline that ends it (echo, a file)
        prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
        if (!prompt.empty() && prompt.back() == '\n') prompt.pop_back();
    }

    const int64_t L = run_cfg.model.max_seq_len, V = run_cfg.model.vocab_size;
    if (prompt.empty() && tok.eot < 0 && tok.bos < 0)
        fail("sample: an empty prompt starts from the end-of-text token, and {} has none: give --prompt", tok.source);
    std::vector<int32_t> ids =
        !prompt.empty() ? data::tokenizer_encode(tok, prompt) : std::vector<int32_t>{tok.eot >= 0 ? tok.eot : tok.bos};
    int64_t dropped = 0;
    if (int64_t(ids.size()) > L - 1) {  // keep room for one generated token; the left is dropped
        dropped = int64_t(ids.size()) - (L - 1);
        ids.erase(ids.begin(), ids.begin() + dropped);
        spdlog::warn(
            "sample: the prompt has {} tokens, more than the model's {} positions leave room for; its first {} "
            "tokens were dropped",
            int64_t(ids.size()) + dropped, L, dropped);
    }
    const std::string prompt_text = data::tokenizer_decode(tok, ids);  // what the kept prompt ids decode to
    auto lm = eval::load_model(ref, a.backend, 1, L);                  // op scratch sized for a prefill of L tokens
    spdlog::info("sample: {} on {}", eval::checkpoint_label(ref), lm->backend->name());
    KvCache cache = open_kv_cache(*lm->model, L);

    json samples = json::array();
    double decode_seconds = 0;
    int64_t decode_tokens = 0;
    for (int64_t s = 0; s < a.num_samples; ++s) {
        cache.length = 0;
        if (!a.json_out) {
            if (a.num_samples > 1) fmt::print("{}--- sample {}\n", s ? "\n" : "", s + 1);
            fmt::print("{}", prompt);
            std::fflush(stdout);
        }
        std::vector<float> logits = kv_cache_forward(*lm->model, cache, ids);
        std::vector<int32_t> gen;
        std::string shown;  // the text of gen printed so far
        // Prints what decoding gen adds to `shown`: the whole text is decoded each time, since a token's
        // text can depend on its neighbours (SentencePiece drops the first piece's space); trailing
        // U+FFFD (a character whose bytes are not all generated yet) waits unless `final`.
        auto gen_text = [&] {  // the text gen adds after the prompt's ids
            std::vector<int32_t> all = ids;
            all.insert(all.end(), gen.begin(), gen.end());
            std::string text = data::tokenizer_decode(tok, all);
            return text.compare(0, prompt_text.size(), prompt_text) == 0 ? text.substr(prompt_text.size())
                                                                         : data::tokenizer_decode(tok, gen);
        };
        auto print_new = [&](bool final) {
            std::string text = gen_text();
            while (!final && text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0)
                text.resize(text.size() - 3);
            if (text.size() <= shown.size() || text.compare(0, shown.size(), shown) != 0) return;
            std::fwrite(text.data() + shown.size(), 1, text.size() - shown.size(), stdout);
            std::fflush(stdout);
            shown = std::move(text);
        };
        std::string stop = "max_tokens";
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < a.max_tokens; ++i) {
            const int32_t t = eval::sample_token(logits, V, so, uint32_t(s), uint64_t(cache.length));
            if (t == tok.eot) {
                stop = "eot";
                break;
            }
            gen.push_back(t);
            if (!a.json_out) print_new(false);
            if (cache.length >= L) {
                stop = "max_seq_len";
                break;
            }
            if (i + 1 < a.max_tokens) {
                logits = kv_cache_forward(*lm->model, cache, std::span<const int32_t>(&gen.back(), 1));
                ++decode_tokens;
            }
        }
        decode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        samples.push_back(json{{"text", gen_text()}, {"tokens", gen}, {"stop", stop}});
        if (!a.json_out) {
            print_new(true);
            fmt::print("\n");
            std::fflush(stdout);  // the text ends its line before the log line on stderr
        }
    }
    const double tps = decode_seconds > 0 ? double(decode_tokens) / decode_seconds : 0.0;
    spdlog::info("sample: {} decode steps in {:.2f} s: {:.1f} tokens/s ({} backend)", decode_tokens, decode_seconds,
                 tps, lm->backend->name());
    if (a.json_out)
        std::cout << json_text(json{{"checkpoint", ref.dir},
                                    {"optimizer", ref.optimizer},
                                    {"step", ref.step},
                                    {"backend", lm->backend->name()},
                                    {"prompt", prompt},
                                    {"prompt_tokens", int64_t(ids.size())},
                                    {"prompt_tokens_dropped", dropped},
                                    {"seed", a.seed},
                                    {"decode_tokens_per_sec", tps},
                                    {"samples", samples}})  // a sample may end in a cut multi-byte character
                  << "\n";
}

}  // namespace

void register_sample_command(CLI::App& app) {
    auto a = std::make_shared<SampleArgs>();
    CLI::App* cmd = app.add_subcommand("sample", "Generate text from a checkpoint (KV cache; streams to stdout)");
    cmd->add_option("checkpoint", a->path,
                    "A run folder (with --optimizer), a checkpoint folder, or a folder `skew import` wrote")
        ->required();
    cmd->add_option("--optimizer", a->optimizer,
                    "The optimizer whose checkpoint to use (needed when the run has several)");
    cmd->add_option("--which", a->which, "best or last (default: best when present, else last)")
        ->check(CLI::IsMember({"best", "last"}));
    cmd->add_option("--prompt", a->prompt, "Prompt text (default: standard input, less its final newline)")
        ->each([a](const std::string&) { a->prompt_given = true; });
    cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate at most (default 128)")->check(int_at_least(1));
    cmd->add_option("--temperature", a->temperature, "Softmax temperature; 0 = greedy (default 1)")
        ->check(real_at_least_zero());
    cmd->add_option("--top-k", a->top_k, "Sample among the k most probable tokens; 0 = all (default)")
        ->check(int_at_least(0));
    cmd->add_option("--top-p", a->top_p, "Nucleus: the smallest set of tokens with probability >= p (default 1)")
        ->check(probability_open_closed());
    cmd->add_option("--seed", a->seed, "Seed of the draws: the same seed gives the same text on the same backend")
        ->check(uint64_value());
    cmd->add_option("--num-samples", a->num_samples, "Independent samples of the same prompt (default 1)")
        ->check(int_at_least(1));
    cmd->add_option("--tokenizer", a->tokenizer_dir, "Tokenizer folder (default: the run's data.tokenizer_dir)");
    cmd->add_option("--backend", a->backend, fmt::format("{} (default auto)", choice_list<BackendChoice>()))
        ->check(CLI::IsMember(choice_names<BackendChoice>()));
    cmd->add_flag("--json", a->json_out, "Print the samples as JSON instead of streaming text");
    cmd->callback([a] { run_sample(*a); });
}

}  // namespace skew::tools
