// The CPU reference backend: the Backend interface (kernels/backend.h) forwarding to the free
// functions of kernels/cpu/cpu_ops.h with bf16 activations. It is the reference every CUDA kernel
// is compared with (docs/design.md, "Two backends, one model").
#include <cstring>
#include <memory>

#include "engine/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew {

namespace {

struct CpuBackend final : Backend {
    const char* name() const override { return "cpu"; }
    // matmul widens bf16 operands tile by tile at every call (kernels/cpu/matmul.cpp)
    bool matmul_widens_bf16_weights() const override { return true; }

    void copy_to_device(void* dst, const void* src, int64_t bytes) override {
        if (bytes < 0) fail("cpu backend: copy_to_device of {} bytes", bytes);
        if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
    }
    void copy_to_host(void* dst, const void* src, int64_t bytes) override {
        if (bytes < 0) fail("cpu backend: copy_to_host of {} bytes", bytes);
        if (bytes > 0) std::memcpy(dst, src, size_t(bytes));
    }
    void synchronize() override {}

    void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) override {
        cpu::matmul(c, a, b, s);
    }

    void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                           int64_t seq_len, int64_t channels, int64_t vocab_rows) override {
        cpu::embedding_forward(out, tokens, wte, wpe, batch, seq_len, channels, vocab_rows);
    }
    void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens, int64_t batch,
                            int64_t seq_len, int64_t channels, int64_t vocab_rows) override {
        cpu::embedding_backward(dwte, dwpe, dout, tokens, batch, seq_len, channels, vocab_rows);
    }

    void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                           int64_t n_rows, int64_t channels, float eps) override {
        cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, n_rows, channels, eps);
    }
    void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                            const float* weight, const float* mean, const float* rstd, int64_t n_rows, int64_t channels,
                            bool accumulate_dinp) override {
        cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n_rows, channels, accumulate_dinp);
    }

    void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows, int64_t channels,
                         float eps) override {
        cpu::rmsnorm_forward(out, rstd, inp, weight, n_rows, channels, eps);
    }
    void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                          const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp) override {
        cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, n_rows, channels, accumulate_dinp);
    }
    void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels) override {
        cpu::bias_add_forward(out, bias, n_rows, channels);
    }
    void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels) override {
        cpu::bias_add_backward(dbias, dout, n_rows, channels);
    }
    void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
              bool inverse) override {
        cpu::rope(x, batch, seq_len, n_heads, head_dim, pos0, theta, inverse);
    }

    void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                           const AttentionShape& s) override {
        cpu::attention_forward(out, lse, q, k, v, s);
    }
    void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, const AttentionShape& s) override {
        cpu::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s);
    }

    void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n) override { cpu::swiglu_forward(h, a, b, n); }
    void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n) override {
        cpu::swiglu_backward(da, db, dh, a, b, n);
    }

    void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                              bool accumulate) override {
        cpu::sigmoid_gate_forward(out, logit, s, n_rows, channels, accumulate);
    }
    void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s,
                               int64_t n_rows, int64_t channels) override {
        cpu::sigmoid_gate_backward(ds, dlogit, dout, logit, s, n_rows, channels);
    }

    void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                            float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                            const RouterOptions& o) override {
        cpu::moe_router_forward(probs, expert_idx, gates, counts, balance_loss, z_loss, mean_probs, logits, s, o);
    }
    void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                             const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                             float d_z, const RouterShape& s, const RouterOptions& o) override {
        cpu::moe_router_backward(dlogits, dgates, logits, probs, expert_idx, gates, counts, d_balance, d_z, s, o);
    }

    void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                      int64_t n_tokens, int64_t top_k, int64_t n_experts) override {
        cpu::moe_dispatch(sorted_to_copy, copy_to_sorted, offsets, expert_idx, n_tokens, top_k, n_experts);
    }
    void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                            int64_t channels) override {
        cpu::moe_gather_forward(xs, x, sorted_to_copy, n_tokens, top_k, channels);
    }
    void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                             int64_t channels, bool accumulate) override {
        cpu::moe_gather_backward(dx, dxs, copy_to_sorted, n_tokens, top_k, channels, accumulate);
    }
    void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                            int64_t n_experts, int64_t in_features, int64_t out_features) override {
        cpu::moe_matmul_forward(out, inp, weight, offsets, n_experts, in_features, out_features);
    }
    void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                             int64_t out_features, bool accumulate_dinp) override {
        cpu::moe_matmul_backward(dinp, dweight, dout, inp, weight, offsets, n_experts, in_features, out_features,
                                 accumulate_dinp);
    }
    void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted,
                             int64_t n_tokens, int64_t top_k, int64_t channels) override {
        cpu::moe_combine_forward(out, ys, gates, copy_to_sorted, n_tokens, top_k, channels);
    }
    void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                              const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                              int64_t channels) override {
        cpu::moe_combine_backward(dys, dgates, dout, ys, gates, copy_to_sorted, n_tokens, top_k, channels);
    }

    void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n) override {
        cpu::residual_forward(out, a, b, n);
    }
    void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) override { cpu::accumulate(dst, src, n); }
    void scale(TensorRef x, float factor, int64_t n) override { cpu::scale(x, factor, n); }
    void zero(TensorRef x, int64_t n) override { cpu::zero(x, n); }
    void convert(TensorRef dst, ConstTensorRef src, int64_t n) override { cpu::convert(dst, src, n); }
    double sum_squares(std::span<const BufferRef> buffers) override { return cpu::sum_squares(buffers); }
    void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld,
                        float alpha) override {
        if (rows < 0 || cols < 0 || ld < cols) fail("dot_accumulate: bad shape rows {} cols {} ld {}", rows, cols, ld);
        if (ld == cols) {  // contiguous: the (1, 1, rows cols) product the Gram norm has always used here
            cpu::matmul(TensorRef(out), ConstTensorRef(a), ConstTensorRef(b),
                        MatmulShape{1, 1, rows * cols, false, false, alpha, 1.0f});
            return;
        }
        for (int64_t r = 0; r < rows; ++r)
            cpu::matmul(TensorRef(out), ConstTensorRef(a + r * ld), ConstTensorRef(b + r * ld),
                        MatmulShape{1, 1, cols, false, false, alpha, 1.0f});
    }

    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                               int64_t vocab_size, int64_t padded_vocab_size) override {
        cpu::cross_entropy_forward(losses, logits, targets, n_tokens, vocab_size, padded_vocab_size);
    }
    void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                                int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) override {
        const float scale = n_tokens > 0 ? dloss / float(n_tokens) : 0.0f;
        cpu::cross_entropy_backward_scaled(dlogits, logits, targets, scale, n_tokens, vocab_size, padded_vocab_size);
    }
    int64_t lm_head_workspace_bytes(const ClassifierShape& s) const override { return cpu::lm_head_workspace_bytes(s); }
    void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                               ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                               void* workspace) override {
        cpu::lm_head_cross_entropy(mean_loss, losses, dx, dwte, x, wte, targets, dloss, s, workspace);
    }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace skew
