// The model touches backend memory only through the Backend interface (the model runs
// unchanged on the GPU, where the arena is device memory a host dereference would crash on). The
// CPU backend is wrapped so that the arena's pages are inaccessible (mprotect PROT_NONE) except
// while a backend op runs: binding, initialization, forward/backward over microbatches, grad norm,
// clipping and evaluation then run with any direct host access to the arena faulting, named by
// buffer. The guarded run must also give the unguarded run's results bit for bit.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "plan/plan.h"

using namespace skew;

namespace {

// The page-aligned interior of the arena: what the guard protects (the partial pages at its two
// ends, under 4 KiB each, stay accessible).
struct Region {
    char* begin = nullptr;
    char* end = nullptr;
    const Arena* arena = nullptr;
};
Region g_region;

// SIGSEGV inside the protected arena: say which buffer was touched from the host, then exit 3.
void on_segv(int, siginfo_t* info, void*) {
    const char* addr = static_cast<const char*>(info->si_addr);
    char msg[512];
    int n = 0;
    if (g_region.arena && addr >= g_region.begin && addr < g_region.end) {
        const int64_t off = addr - g_region.arena->base;
        const MemoryPlan& plan = *g_region.arena->plan;
        const char* name = "?";
        for (size_t i = 0; i < plan.buffers.size(); ++i)
            if (off >= plan.offsets[i] && off < plan.offsets[i] + plan.buffers[i].bytes())
                name = plan.buffers[i].name.c_str();
        n = snprintf(msg, sizeof msg,
                     "\nFAILED: host access to backend memory outside a Backend op: arena offset %lld (%s)\n",
                     static_cast<long long>(off), name);
    } else {
        n = snprintf(msg, sizeof msg, "\nFAILED: segmentation fault outside the arena\n");
    }
    if (n > 0) (void)!write(2, msg, size_t(n));
    _exit(3);
}

void protect(bool on) {
    if (g_region.end > g_region.begin)
        REQUIRE(mprotect(g_region.begin, size_t(g_region.end - g_region.begin),
                         on ? PROT_NONE : PROT_READ | PROT_WRITE) == 0);
}

/// The CPU backend with the arena opened (read/write) only for the duration of each op.
struct GuardedBackend : Backend {
    explicit GuardedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
    struct Open {
        GuardedBackend& g;
        explicit Open(GuardedBackend& b) : g(b) {
            ++g.ops;
            protect(false);
        }
        ~Open() { protect(true); }
    };
    const char* name() const override { return "guarded-cpu"; }
    void copy_to_device(void* dst, const void* src, int64_t bytes) override {
        Open open_arena(*this);
        inner_->copy_to_device(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, int64_t bytes) override {
        Open open_arena(*this);
        inner_->copy_to_host(dst, src, bytes);
    }
    void synchronize() override {
        Open open_arena(*this);
        inner_->synchronize();
    }
    void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) override {
        Open open_arena(*this);
        inner_->matmul(c, a, b, s);
    }
    void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                           int64_t seq_len, int64_t channels, int64_t vocab_rows) override {
        Open open_arena(*this);
        inner_->embedding_forward(out, tokens, wte, wpe, batch, seq_len, channels, vocab_rows);
    }
    void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens, int64_t batch,
                            int64_t seq_len, int64_t channels, int64_t vocab_rows) override {
        Open open_arena(*this);
        inner_->embedding_backward(dwte, dwpe, dout, tokens, batch, seq_len, channels, vocab_rows);
    }
    void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                           int64_t n_rows, int64_t channels, float eps) override {
        Open open_arena(*this);
        inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, n_rows, channels, eps);
    }
    void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                            const float* weight, const float* mean, const float* rstd, int64_t n_rows, int64_t channels,
                            bool accumulate_dinp) override {
        Open open_arena(*this);
        inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n_rows, channels,
                                   accumulate_dinp);
    }
    void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows, int64_t channels,
                         float eps) override {
        Open open_arena(*this);
        inner_->rmsnorm_forward(out, rstd, inp, weight, n_rows, channels, eps);
    }
    void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                          const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp) override {
        Open open_arena(*this);
        inner_->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, n_rows, channels, accumulate_dinp);
    }
    void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels) override {
        Open open_arena(*this);
        inner_->bias_add_forward(out, bias, n_rows, channels);
    }
    void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels) override {
        Open open_arena(*this);
        inner_->bias_add_backward(dbias, dout, n_rows, channels);
    }
    void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
              bool inverse) override {
        Open open_arena(*this);
        inner_->rope(x, batch, seq_len, n_heads, head_dim, pos0, theta, inverse);
    }
    void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                           const AttentionShape& s) override {
        Open open_arena(*this);
        inner_->attention_forward(out, lse, q, k, v, s);
    }
    void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, const AttentionShape& s) override {
        Open open_arena(*this);
        inner_->attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
    }
    void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n) override {
        Open open_arena(*this);
        inner_->swiglu_forward(h, a, b, n);
    }
    void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n) override {
        Open open_arena(*this);
        inner_->swiglu_backward(da, db, dh, a, b, n);
    }
    void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                              bool accumulate) override {
        Open open_arena(*this);
        inner_->sigmoid_gate_forward(out, logit, s, n_rows, channels, accumulate);
    }
    void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s,
                               int64_t n_rows, int64_t channels) override {
        Open open_arena(*this);
        inner_->sigmoid_gate_backward(ds, dlogit, dout, logit, s, n_rows, channels);
    }
    void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                            float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                            const RouterOptions& o) override {
        Open open_arena(*this);
        inner_->moe_router_forward(probs, expert_idx, gates, counts, balance_loss, z_loss, mean_probs, logits, s, o);
    }
    void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                             const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                             float d_z, const RouterShape& s, const RouterOptions& o) override {
        Open open_arena(*this);
        inner_->moe_router_backward(dlogits, dgates, logits, probs, expert_idx, gates, counts, d_balance, d_z, s, o);
    }
    void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                      int64_t n_tokens, int64_t top_k, int64_t n_experts) override {
        Open open_arena(*this);
        inner_->moe_dispatch(sorted_to_copy, copy_to_sorted, offsets, expert_idx, n_tokens, top_k, n_experts);
    }
    void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                            int64_t channels) override {
        Open open_arena(*this);
        inner_->moe_gather_forward(xs, x, sorted_to_copy, n_tokens, top_k, channels);
    }
    void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                             int64_t channels, bool accumulate) override {
        Open open_arena(*this);
        inner_->moe_gather_backward(dx, dxs, copy_to_sorted, n_tokens, top_k, channels, accumulate);
    }
    void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                            int64_t n_experts, int64_t in_features, int64_t out_features) override {
        Open open_arena(*this);
        inner_->moe_matmul_forward(out, inp, weight, offsets, n_experts, in_features, out_features);
    }
    void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                             int64_t out_features, bool accumulate_dinp) override {
        Open open_arena(*this);
        inner_->moe_matmul_backward(dinp, dweight, dout, inp, weight, offsets, n_experts, in_features, out_features,
                                    accumulate_dinp);
    }
    void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted,
                             int64_t n_tokens, int64_t top_k, int64_t channels) override {
        Open open_arena(*this);
        inner_->moe_combine_forward(out, ys, gates, copy_to_sorted, n_tokens, top_k, channels);
    }
    void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                              const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                              int64_t channels) override {
        Open open_arena(*this);
        inner_->moe_combine_backward(dys, dgates, dout, ys, gates, copy_to_sorted, n_tokens, top_k, channels);
    }
    void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n) override {
        Open open_arena(*this);
        inner_->residual_forward(out, a, b, n);
    }
    void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) override {
        Open open_arena(*this);
        inner_->accumulate(dst, src, n);
    }
    void scale(TensorRef x, float factor, int64_t n) override {
        Open open_arena(*this);
        inner_->scale(x, factor, n);
    }
    void zero(TensorRef x, int64_t n) override {
        Open open_arena(*this);
        inner_->zero(x, n);
    }
    void convert(TensorRef dst, ConstTensorRef src, int64_t n) override {
        Open open_arena(*this);
        inner_->convert(dst, src, n);
    }
    void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld,
                        float alpha) override {
        Open open_arena(*this);
        inner_->dot_accumulate(out, a, b, rows, cols, ld, alpha);
    }
    double sum_squares(std::span<const BufferRef> buffers) override {
        Open open_arena(*this);
        return inner_->sum_squares(buffers);
    }
    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                               int64_t vocab_size, int64_t padded_vocab_size) override {
        Open open_arena(*this);
        inner_->cross_entropy_forward(losses, logits, targets, n_tokens, vocab_size, padded_vocab_size);
    }
    void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                                int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) override {
        Open open_arena(*this);
        inner_->cross_entropy_backward(dlogits, logits, targets, dloss, n_tokens, vocab_size, padded_vocab_size);
    }
    int64_t lm_head_workspace_bytes(const ClassifierShape& s) const override {
        return inner_->lm_head_workspace_bytes(s);
    }
    void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                               ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                               void* workspace) override {
        Open open_arena(*this);
        inner_->lm_head_cross_entropy(mean_loss, losses, dx, dwte, x, wte, targets, dloss, s, workspace);
    }

    std::unique_ptr<Backend> inner_;
    int64_t ops = 0;
};

struct Results {
    std::vector<double> losses;  // per microbatch: lm, balance, z; then grad norm, clipped norm, eval lm
};

// Bind, initialize, two steps' forward/backward over every microbatch, grad norm, clip, eval.
Results run_model(const Config& cfg, const ParamTable& table, Arena& arena, Backend& be, bool guarded) {
    if (guarded) protect(true);
    Model model = model_bind(cfg, table, arena, be);
    model_init(model, 1234);
    const int64_t mb = cfg.train.microbatch, T = cfg.train.seq_len, accum = cfg.train.batch_size / mb;
    std::vector<int32_t> tokens(size_t(cfg.train.batch_size * T + 1));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % size_t(cfg.model.vocab_size));
    Results r;
    for (uint32_t step = 1; step <= 2; ++step) {
        model_zero_grads(model);
        for (int64_t m = 0; m < accum; ++m) {
            const int32_t* x = tokens.data() + m * mb * T;
            LossParts p = model_forward_backward(model, x, x + 1, m, step, accum, true);
            r.losses.insert(r.losses.end(), {p.lm_loss, p.balance_loss, p.z_loss});
        }
        r.losses.push_back(model_grad_norm(model));
        r.losses.push_back(model_clip_gradients(model, 0.5));
    }
    r.losses.push_back(model_eval(model, tokens.data(), tokens.data() + 1).lm_loss);
    if (guarded) protect(false);
    return r;
}

}  // namespace

TEST_CASE("the model reaches backend memory only through the Backend interface (arena pages guarded)") {
    // tiny.yaml, and with gated shared experts in its MoE block (docs/architectures.md)
    const bool shared = GENERATE(false, true);
    INFO((shared ? "with" : "without") << " shared experts");
    const Config cfg =
        load_config(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml",
                    shared ? std::vector<std::string>{"model.n_shared_experts=2", "model.shared_expert_gate=sigmoid"}
                           : std::vector<std::string>{});
    const ParamTable table = build_param_table(cfg.model);
    const MemoryPlan plan = build_memory_plan(cfg, table, builtin_optimizer("skewadam"), cfg.train.microbatch);
    REQUIRE(cfg.train.batch_size / cfg.train.microbatch >= 2);  // accumulation is exercised

    auto plain_backend = make_cpu_backend();
    Arena plain = allocate_host_arena(plan);
    const Results expect = run_model(cfg, table, plain, *plain_backend, false);

    Arena arena = allocate_host_arena(plan);
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    g_region.arena = &arena;
    g_region.begin = reinterpret_cast<char*>((uintptr_t(arena.base) + page - 1) / page * page);
    g_region.end = reinterpret_cast<char*>((uintptr_t(arena.base) + uintptr_t(arena.bytes)) / page * page);
    REQUIRE(g_region.end - g_region.begin > arena.bytes / 2);  // nearly all of the arena is guarded
    struct sigaction sa {
    }, old{};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGSEGV, &sa, &old) == 0);

    GuardedBackend guarded(make_cpu_backend());
    const Results got = run_model(cfg, table, arena, guarded, true);
    sigaction(SIGSEGV, &old, nullptr);
    g_region = Region{};

    CHECK(guarded.ops > 100);  // every op went through the guard
    REQUIRE(got.losses.size() == expect.losses.size());
    for (size_t i = 0; i < got.losses.size(); ++i) {
        INFO("result " << i);
        CHECK(got.losses[i] == expect.losses[i]);  // same backend, same inputs: bit for bit
    }
}
