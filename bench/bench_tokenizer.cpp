// Tokenizer throughput: MB/s of skew's GPT-2 BPE on the fetched corpus on one core and on
// all cores, side by side in the same run with tiktoken (WebAssembly) and gpt-3-encoder under node
// (bench/tokenizer/bench.mjs), checking that the token ids are identical. Writes JSON with the commit.
// One-core figures are given by wall clock and by CPU time; the latter is the fair one on a shared machine.
#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <time.h>
#include <vector>

#include "bench/bench_util.h"
#include "data/reader.h"
#include "data/tokenizer.h"
#include "engine/error.h"

using namespace skew::data;
namespace fs = std::filesystem;

using skew::bench::shell;

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One pass over all documents on `threads` threads, each with its own workspace (persisting across
// passes, as in `skew prepare`). Returns seconds; tokens and the FNV-1a checksum of the ids in order.
static double cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

static double encode_pass(const Tokenizer& tok, const std::vector<std::string>& docs, int threads,
                          std::vector<std::unique_ptr<TokenizerWorkspace>>& ws, int64_t& tokens, uint32_t& checksum,
                          double& cpu) {
    std::vector<std::vector<int32_t>> ids(docs.size());
    double c0 = cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 16) num_threads(threads)
    for (int64_t i = 0; i < int64_t(docs.size()); i++)
        tokenizer_encode(tok, docs[i], ids[i], *ws[size_t(omp_get_thread_num())]);
    double s = seconds_since(t0);
    cpu = cpu_seconds() - c0;
    tokens = 0;
    checksum = 0x811c9dc5u;
    for (auto& v : ids) {
        tokens += int64_t(v.size());
        for (int32_t id : v) checksum = (checksum ^ uint32_t(id)) * 16777619u;
    }
    return s;
}

struct Measured {
    double cold_mbps, mbps, cpu_mbps;
    int64_t tokens;
    uint32_t checksum;
};

static Measured measure(const Tokenizer& tok, const std::vector<std::string>& docs, int64_t bytes, int threads,
                        int passes) {
    std::vector<std::unique_ptr<TokenizerWorkspace>> ws;
    for (int t = 0; t < threads; t++) ws.push_back(std::make_unique<TokenizerWorkspace>());
    Measured m{};
    double cpu;
    double cold = encode_pass(tok, docs, threads, ws, m.tokens, m.checksum, cpu);
    std::vector<double> times, cpus;
    for (int p = 0; p < passes; p++) {
        int64_t t;
        uint32_t c;
        times.push_back(encode_pass(tok, docs, threads, ws, t, c, cpu));
        cpus.push_back(cpu);
    }
    std::sort(times.begin(), times.end());
    std::sort(cpus.begin(), cpus.end());
    m.cold_mbps = double(bytes) / 1e6 / cold;
    m.mbps = double(bytes) / 1e6 / times[times.size() / 2];
    m.cpu_mbps = double(bytes) / 1e6 / cpus[cpus.size() / 2];
    return m;
}

int main(int argc, char** argv) {
    skew::cpu::process_env_reexec(argv);  // OMP_WAIT_POLICY and the OpenBLAS core, as skew sets them
    std::vector<std::string> corpus;
    std::string tokenizer_dir = "data/tokenizer", out_path = "runs/bench_tokenizer.json", js_dir = "bench/tokenizer";
    int passes = 3;
    bool js = true;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_tokenizer: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--corpus") corpus.push_back(next());
        else if (a == "--tokenizer") tokenizer_dir = next();
        else if (a == "--out") out_path = next();
        else if (a == "--passes") passes = std::max(1, std::stoi(next()));
        else if (a == "--no-js") js = false;
        else if (a == "--js-dir") js_dir = next();
        else {
            std::fprintf(stderr,
                         "usage: bench_tokenizer [--corpus PATH]... [--tokenizer DIR] [--out FILE] [--passes N] "
                         "[--no-js] [--js-dir DIR]\n"
                         "  run from the repository root after scripts/fetch_data.sh; default corpus "
                         "data/corpus/nlp-corpus.jsonl\n");
            return 2;
        }
    }
    if (corpus.empty()) corpus.push_back("data/corpus/nlp-corpus.jsonl");
    try {
        Tokenizer tok = tokenizer_load(tokenizer_dir);
        std::vector<std::string> docs = read_documents(corpus);
        int64_t bytes = 0;
        for (auto& d : docs) bytes += int64_t(d.size());
        const int cores = omp_get_max_threads();
        std::printf("corpus: %zu documents, %.2f MB; %d cores\n", docs.size(), double(bytes) / 1e6, cores);

        Measured one = measure(tok, docs, bytes, 1, passes);
        std::printf(
            "skew 1 core:   %.1f MB/s wall, %.1f MB/s CPU time (first pass, empty cache: %.1f MB/s), %lld tokens\n",
            one.mbps, one.cpu_mbps, one.cold_mbps, (long long)one.tokens);
        nlohmann::json scaling = nlohmann::json::array();
        Measured all = one;
        for (int t = 2; t <= cores; t = (t * 2 > cores && t < cores) ? cores : t * 2) {
            all = measure(tok, docs, bytes, t, passes);
            scaling.push_back({{"threads", t}, {"mb_per_s", all.mbps}, {"speedup", all.mbps / one.mbps}});
            std::printf("skew %d cores: %.1f MB/s (x%.2f)\n", t, all.mbps, all.mbps / one.mbps);
            if (all.tokens != one.tokens || all.checksum != one.checksum)
                std::printf("  WARNING: ids differ from the 1-core run\n");
        }

        nlohmann::json result;
        result["bench"] = "tokenizer";
        skew::bench::add_provenance(result, "data bench");
        result["cores"] = cores;
        result["corpus"] = {{"paths", corpus}, {"documents", docs.size()}, {"bytes", bytes}};
        result["skew"] = {{"single_core_mb_per_s", one.mbps},
                          {"single_core_cpu_mb_per_s", one.cpu_mbps},
                          {"single_core_first_pass_mb_per_s", one.cold_mbps},
                          {"all_cores_mb_per_s", all.mbps},
                          {"threads", cores},
                          {"scaling", scaling},
                          {"tokens", one.tokens},
                          {"checksum", one.checksum}};

        if (js) {
            if (!fs::exists(fs::path(js_dir) / "node_modules" / "tiktoken")) {
                std::printf("installing the JS encoders: npm install --prefix %s\n", js_dir.c_str());
                shell("npm install --no-audit --no-fund --prefix " + js_dir + " >/dev/null 2>&1");
            }
            fs::path docs_file = fs::temp_directory_path() / "skew_bench_tokenizer_docs.jsonl";
            {
                std::ofstream f(docs_file, std::ios::binary);
                for (auto& d : docs)
                    f << nlohmann::json{{"text", d}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                      << "\n";
            }
            std::string out =
                shell("node " + js_dir + "/bench.mjs " + docs_file.string() + " " + std::to_string(passes));
            fs::remove(docs_file);
            auto j = nlohmann::json::parse(out, nullptr, false);
            if (j.is_discarded() || !j.contains("tiktoken")) {
                std::printf("node side failed (is node installed? run npm install in %s): %s\n", js_dir.c_str(),
                            out.c_str());
                result["js_error"] = out;
            } else {
                result["node"] = j["node"];
                result["tiktoken"] = j["tiktoken"];
                result["gpt3_encoder"] = j["gpt3_encoder"];
                double tk = j["tiktoken"]["mb_per_s"], g3 = j["gpt3_encoder"]["mb_per_s"];
                double tk_cpu = j["tiktoken"]["cpu_mb_per_s"], g3_cpu = j["gpt3_encoder"]["cpu_mb_per_s"];
                bool same = j["tiktoken"]["tokens"].get<int64_t>() == one.tokens &&
                            j["tiktoken"]["checksum"].get<uint32_t>() == one.checksum;
                result["identical_to_tiktoken"] = same;
                result["ratio_single_core_vs_tiktoken"] = one.mbps / tk;
                result["ratio_all_cores_vs_tiktoken"] = all.mbps / tk;
                result["ratio_single_core_vs_gpt3_encoder"] = one.mbps / g3;
                result["ratio_single_core_cpu_time_vs_tiktoken"] = one.cpu_mbps / tk_cpu;
                result["ratio_single_core_cpu_time_vs_gpt3_encoder"] = one.cpu_mbps / g3_cpu;
                std::printf("tiktoken (wasm, 1 core): %.1f MB/s wall, %.1f MB/s CPU time, %lld tokens\n", tk, tk_cpu,
                            (long long)j["tiktoken"]["tokens"].get<int64_t>());
                std::printf("gpt-3-encoder (1 core):  %.1f MB/s wall, %.1f MB/s CPU time, %lld tokens\n", g3, g3_cpu,
                            (long long)j["gpt3_encoder"]["tokens"].get<int64_t>());
                std::printf(
                    "ids identical to tiktoken: %s; skew/tiktoken on 1 core: %.2fx by CPU time, %.2fx by wall clock; "
                    "%d cores vs tiktoken's 1: %.2fx\n",
                    same ? "yes" : "NO", one.cpu_mbps / tk_cpu, one.mbps / tk, cores, all.mbps / tk);
            }
        }
        fs::path out_file(out_path);
        if (out_file.has_parent_path()) fs::create_directories(out_file.parent_path());
        std::ofstream(out_file) << result.dump(2) << "\n";
        std::printf("wrote %s\n", out_path.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_tokenizer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
