// The CUDA backend: the Backend interface (kernels/backend.h) on one GPU, forwarding every op to
// the launchers of kernels/cuda/<op>.h on one stream (docs/design.md, "Two backends, one model"). The
// CPU backend (kernels/cpu/) is its reference; tests/gpu/ holds every op to it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "kernels/backend.h"

namespace skew::cuda {

class Matmul;
class GroupedMatmul;

/// Backend on CUDA device `device`. All tensor pointers are device memory (the arena); ops are
/// asynchronous on stream(); host-returning ops (sum_squares) and the grouped matmul's offset copy
/// synchronize. Index errors found by kernels (token, target, expert out of range) are recorded in
/// a device error word and thrown by check_errors() (called by sum_squares and synchronize()).
class CudaBackend final : public Backend {
public:
    /// Select `device`, create the stream, cuBLASLt handle and error word. Throws skew::Error when
    /// there is no such device ("no CUDA device" with a hint). The environment variable
    /// SKEW_GROUPED_GEMM (per_expert_loop, the default, or cublas_grouped) picks the grouped expert
    /// GEMM's algorithm (kernels/cuda/moe_matmul.h); another value is an error naming it.
    explicit CudaBackend(int device = 0);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const char* name() const override { return "cuda"; }
    bool device_memory() const override { return true; }
    /// Bind the arena's ws.library, ws.cuda_scratch and ws.cuda_widen (set_matmul_workspace,
    /// set_scratch, set_matmul_widen_buffer); an empty binding returns to backend-owned memory.
    void bind_workspace(const BackendWorkspaceMemory& ws) override;
    /// total - free of cudaMemGetInfo (every process on the device), 0 when the query fails.
    int64_t device_memory_used_bytes() const override;
    /// free of cudaMemGetInfo, -1 when the query fails.
    int64_t device_memory_free_bytes() const override;

    /// One cudaMalloc of `bytes`, zeroed. Throws skew::Error naming `what` with the device's free and
    /// total memory when it fails.
    void* allocate_device_memory(int64_t bytes, const std::string& what) override;
    void free_device_memory(void* p) noexcept override;
    void* cuda_stream() const override { return stream_; }
    bool runs_cuda() const override { return true; }

    /// The stream every op runs on (blocking with respect to the legacy default stream).
    cudaStream_t stream() const { return stream_; }
    /// Wait for all queued work, then check_errors().
    void synchronize() override;
    /// Throw skew::Error naming what the kernels found (and clear the word). Synchronizes.
    void check_errors();
    /// Use caller-owned device memory (e.g. an arena buffer) as the cuBLASLt workspace.
    void set_matmul_workspace(void* workspace, int64_t bytes);
    /// The matrix-product wrapper and the grouped expert matmul (benchmarks).
    Matmul& matmul_impl() { return *mm_; }
    GroupedMatmul& grouped_matmul() { return *grouped_; }
    /// Copy `bytes` from host memory to device memory, stream-ordered (returns once src may be reused).
    void copy_to_device(void* dst, const void* src, int64_t bytes) override;
    /// Copy `bytes` from device memory to host memory; synchronizes the stream, then check_errors().
    void copy_to_host(void* dst, const void* src, int64_t bytes) override;
    /// Use caller-owned device memory (the arena's ws.cuda_scratch) for the ops' scratch. An op
    /// that needs more falls back to backend-owned memory (logged once as outside the plan);
    /// nullptr returns to backend-owned scratch only.
    void set_scratch(void* scratch, int64_t bytes);
    /// Use caller-owned device memory (the arena's ws.cuda_widen, `elems` fp32) to widen the bf16
    /// operands of mixed-dtype products; nullptr returns to backend-owned memory.
    void set_matmul_widen_buffer(float* buffer, int64_t elems);
    /// Bytes of backend-owned scratch currently allocated outside the arena (grows on demand; 0
    /// when every op fit the caller's scratch).
    int64_t scratch_bytes() const { return scratch_bytes_; }

    void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) override;

    void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                           int64_t seq_len, int64_t channels, int64_t vocab_rows) override;
    void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens, int64_t batch,
                            int64_t seq_len, int64_t channels, int64_t vocab_rows) override;

    void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight, const float* bias,
                           int64_t n_rows, int64_t channels, float eps) override;
    void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                            const float* weight, const float* mean, const float* rstd, int64_t n_rows, int64_t channels,
                            bool accumulate_dinp) override;

    void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows, int64_t channels,
                         float eps) override;
    void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                          const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp) override;
    void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels) override;
    void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels) override;
    void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
              bool inverse) override;

    void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                           const AttentionShape& s) override;
    void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                            const bf16* out, const float* lse, const AttentionShape& s) override;

    void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n) override;
    void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n) override;
    void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                              bool accumulate) override;
    void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s,
                               int64_t n_rows, int64_t channels) override;

    void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                            float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                            const RouterOptions& o) override;
    void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                             const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                             float d_z, const RouterShape& s, const RouterOptions& o) override;

    void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                      int64_t n_tokens, int64_t top_k, int64_t n_experts) override;
    void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                            int64_t channels) override;
    void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                             int64_t channels, bool accumulate) override;
    void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                            int64_t n_experts, int64_t in_features, int64_t out_features) override;
    void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                             int64_t out_features, bool accumulate_dinp) override;
    void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted,
                             int64_t n_tokens, int64_t top_k, int64_t channels) override;
    void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                              const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                              int64_t channels) override;

    void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n) override;
    void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) override;
    void scale(TensorRef x, float factor, int64_t n) override;
    void zero(TensorRef x, int64_t n) override;
    void init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std) override;
    void convert(TensorRef dst, ConstTensorRef src, int64_t n) override;
    double sum_squares(std::span<const BufferRef> buffers) override;
    void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld,
                        float alpha) override;
    /// cuBLASLt plans are per shape (kernels/cuda/matmul.cpp): variable row counts read multiples of 128.
    int64_t matmul_row_granularity() const override { return 128; }

    void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                               int64_t vocab_size, int64_t padded_vocab_size) override;
    void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                                int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) override;
    int64_t lm_head_workspace_bytes(const ClassifierShape& s) const override;
    void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                               ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                               void* workspace) override;

private:
    /// Device scratch of at least `bytes` (16-byte aligned), grown (after a sync) when too small.
    void* scratch(int64_t bytes);

    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    int* error_word_ = nullptr;  // device
    void* scratch_ = nullptr;    // backend-owned, outside the arena
    int64_t scratch_bytes_ = 0;
    void* ext_scratch_ = nullptr;  // caller-owned (arena)
    int64_t ext_scratch_bytes_ = 0;
    bool warned_scratch_ = false;
    bool library_bound_ = false;  // bind_workspace gave the cuBLASLt workspace (an arena buffer)
    std::unique_ptr<Matmul> mm_;
    std::unique_ptr<GroupedMatmul> grouped_;
};

/// The CUDA backend on `device` (throws skew::Error when no GPU is visible).
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

}  // namespace skew::cuda
