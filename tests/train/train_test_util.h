// Shared helpers of the train tests: a tiny MoE config, its training session with the arena filled with
// deterministic finite values, scratch folders, and running a command line.
#pragma once
#include <sys/wait.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "plan/plan.h"
#include "runtime/session.h"
#include "tests/temp_dir.h"

namespace train_test {

/// The message of the skew::Error that `f` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const skew::Error& e) {
        return e.what();
    }
    return "(no error)";
}

/// A model small enough to checkpoint in milliseconds: 2 blocks (dense, MoE of 4 experts), GQA 2/1.
inline const char* TINY_YAML = R"(model:
  vocab_size: 100
  padded_vocab_size: 128
  d_model: 16
  n_blocks: 2
  moe_blocks: [1]
  n_heads: 2
  n_kv_heads: 1
  d_ff: 32
  max_seq_len: 16
  n_experts: 4
  d_expert: 16
  top_k: 2
train:
  optimizers: [skewadam, adamw]
  steps: 20
  batch_size: 4
  seq_len: 8
  microbatch: 2
runtime:
  backend: cpu
  workspace_gib: 0
)";

/// A training session of one optimizer on the CPU backend (runtime/session.h), with its config,
/// table, plan and arena by name. Members are destroyed in reverse: the session before its backend.
struct Run {
    std::unique_ptr<skew::Backend> backend;
    std::unique_ptr<skew::Session> session;
    skew::Config& cfg;
    skew::ParamTable& table;
    skew::MemoryPlan& plan;
    skew::Arena& arena;

    Run(std::unique_ptr<skew::Backend> b, std::unique_ptr<skew::Session> s)
        : backend(std::move(b)), session(std::move(s)), cfg(session->cfg), table(session->table), plan(session->plan),
          arena(session->arena) {}
};

inline std::unique_ptr<Run> make_run(const std::string& optimizer = "skewadam") {
    const skew::Config cfg = skew::load_config_text(TINY_YAML, "tiny-test.yaml");
    skew::SessionSpec spec;
    spec.optimizer = cfg.find_optimizer(optimizer);
    spec.microbatch = cfg.train.microbatch;
    auto backend = skew::make_cpu_backend();
    auto session = skew::open_session(cfg, *backend, spec);
    return std::make_unique<Run>(std::move(backend), std::move(session));
}

/// Fill every weight and state buffer with finite values derived from `seed` (bf16 and fp32 bit
/// patterns with exponents well inside the finite range).
inline void fill(Run& r, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 12345u;
    auto next = [&] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        return x;
    };
    for (size_t i = 0; i < r.plan.buffers.size(); ++i) {
        const auto& b = r.plan.buffers[i];
        if (b.kind != skew::BufferKind::WEIGHT && b.kind != skew::BufferKind::STATE && b.kind != skew::BufferKind::GRAD)
            continue;
        char* p = static_cast<char*>(r.arena.ptr(int(i)));
        for (int64_t e = 0; e < b.numel(); ++e) {
            float v = float(int32_t(next() % 20001) - 10000) * 1e-4f;
            uint32_t bits = std::bit_cast<uint32_t>(v);
            if (b.dtype == skew::DType::BF16) {
                uint16_t h = uint16_t(bits >> 16);
                std::memcpy(p + 2 * e, &h, 2);
            } else {
                std::memcpy(p + 4 * e, &bits, 4);
            }
        }
    }
}

/// A fresh empty folder under the system temp folder.
inline std::string scratch(const std::string& name) {
    auto d = skew::test::test_temp_root() / ("skew-train-test-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

struct Output {
    int status;
    std::string text;
};

/// Run a shell command, capturing stdout and stderr together.
inline Output shell(const std::string& cmd) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    if (!p) return {-1, out};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    int st = pclose(p);
    return Output{WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace train_test
