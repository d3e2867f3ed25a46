// The CUDA backend: Backend (kernels/backend.h) forwarding to the launchers of kernels/cuda/ on one
// stream, with a growable device scratch for the reductions' partial sums and the sorts, and a
// device error word for index errors found inside kernels (docs/design.md, "Two backends, one model").
// Host code, compiled by the host compiler (fmt is fine here).
#include "kernels/cuda/cuda_backend.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/bias.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_alloc.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/init_kernels.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/matmul.h"
#include "kernels/cuda/moe_dispatch.h"
#include "kernels/cuda/moe_matmul.h"
#include "kernels/cuda/moe_router.h"
#include "kernels/cuda/nvtx.h"
#include "kernels/cuda/rmsnorm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sigmoid_gate.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

CudaBackend::CudaBackend(int device) : device_(device) {
    const int n = device_count();
    if (n == 0)
        fail(
            "CUDA backend: no CUDA device is visible\n--> HINT: run on a machine with an NVIDIA GPU and driver "
            "(nvidia-smi), or use the CPU backend");
    if (device < 0 || device >= n) fail("CUDA backend: device {} does not exist ({} visible)", device, n);
    cuda_check(cudaSetDevice(device));
    cuda_check(cudaFree(nullptr));  // the context exists from here: what it takes is in use now
    const int64_t used_context = device_memory_used_bytes();
    cuda_check(cudaStreamCreate(&stream_));
    error_word_ = static_cast<int*>(device_alloc(sizeof(int), "CUDA backend: error word"));
    cuda_check(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_));
    mm_ = std::make_unique<Matmul>();
    // The grouped expert GEMM's algorithm: per-expert cuBLASLt loop unless SKEW_GROUPED_GEMM names
    // the other (for measuring both in a training run; docs/profiling.md).
    GroupedGemmAlgo algo = GroupedGemmAlgo::PER_EXPERT_LOOP;
    if (const char* v = std::getenv("SKEW_GROUPED_GEMM"); v && *v) {
        const std::string s = v;
        if (s == "cublas_grouped") algo = GroupedGemmAlgo::CUBLAS_GROUPED;
        else if (s != "per_expert_loop")
            fail("CUDA backend: SKEW_GROUPED_GEMM={} is not an algorithm (per_expert_loop or cublas_grouped)", s);
        spdlog::info("CUDA backend: grouped expert GEMM {}", grouped_gemm_algo_name(algo));
    }
    grouped_ = std::make_unique<GroupedMatmul>(*mm_, algo);
    // The start-up measurement of what the process holds outside the arena (the trainer logs the
    // total against skew plan's constant, cuda_runtime_overhead_bytes): the context, then the handles.
    const int64_t used_handles = device_memory_used_bytes();
    spdlog::info(
        "CUDA backend: device memory in use at start-up {:.3f} GiB with the context, {:.3f} GiB with the "
        "library handles and their workspace (whole device, by cudaMemGetInfo)",
        double(used_context) / double(1 << 30), double(used_handles) / double(1 << 30));
}

CudaBackend::~CudaBackend() {
    if (stream_) cudaStreamSynchronize(stream_);
    grouped_.reset();
    mm_.reset();
    device_free(scratch_);
    device_free(error_word_);
    if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::set_scratch(void* scratch, int64_t bytes) {
    if (bytes < 0) fail("CUDA backend: negative scratch size {}", bytes);
    ext_scratch_ = scratch;
    ext_scratch_bytes_ = scratch ? bytes : 0;
}

void CudaBackend::set_matmul_widen_buffer(float* buffer, int64_t elems) { mm_->set_widen_buffer(buffer, elems); }

void CudaBackend::bind_workspace(const BackendWorkspaceMemory& ws) {
    // The cuBLASLt workspace is rebound only to or from an arena buffer: without one the backend
    // keeps its own.
    if (ws.library || library_bound_) set_matmul_workspace(ws.library, ws.library ? ws.library_bytes : 0);
    library_bound_ = ws.library != nullptr;
    set_scratch(ws.scratch, ws.scratch ? ws.scratch_bytes : 0);
    set_matmul_widen_buffer(ws.widen, ws.widen ? ws.widen_elems : 0);
}

int64_t CudaBackend::device_memory_used_bytes() const {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return int64_t(total_b - free_b);
}

int64_t CudaBackend::device_memory_free_bytes() const {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return int64_t(free_b);
}

void* CudaBackend::allocate_device_memory(int64_t bytes, const std::string& what) {
    constexpr double gib = 1024.0 * 1024.0 * 1024.0;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    void* p = nullptr;
    // the arena itself: not one of the allocations device_alloc counts as outside the plan
    const cudaError_t err = cudaMalloc(&p, size_t(bytes));
    if (err != cudaSuccess) {
        cudaGetLastError();
        fail(
            "arena: cudaMalloc of {:.2f} GiB for {} failed ({}); the device has {:.2f} GiB free of {:.2f} GiB. "
            "--> HINT: free the device (other processes: nvidia-smi), or see what fits with `skew plan CONFIG --budget "
            "GIB`",
            double(bytes) / gib, what, cudaGetErrorString(err), double(free_b) / gib, double(total_b) / gib);
    }
    cudaMemset(p, 0, size_t(bytes));
    return p;
}

void CudaBackend::free_device_memory(void* p) noexcept {
    if (p) cudaFree(p);
}

void* CudaBackend::scratch(int64_t bytes) {
    bytes = std::max<int64_t>(bytes, 256);
    if (ext_scratch_ && bytes <= ext_scratch_bytes_) return ext_scratch_;
    if (ext_scratch_ && !warned_scratch_) {
        warned_scratch_ = true;
        spdlog::warn(
            "CUDA backend: an op needs {} bytes of scratch, the plan's ws.cuda_scratch holds {}; allocating "
            "outside the arena (the plan underestimates this op)",
            bytes, ext_scratch_bytes_);
    }
    if (bytes > scratch_bytes_) {
        if (scratch_) {
            cuda_check(cudaStreamSynchronize(stream_));  // work queued on the old scratch may still read it
            device_free(scratch_);
            scratch_ = nullptr;
        }
        const int64_t grown = std::max(bytes, scratch_bytes_ + scratch_bytes_ / 2);
        scratch_ = device_alloc(grown, "CUDA backend: op scratch");
        scratch_bytes_ = grown;
    }
    return scratch_;
}

void CudaBackend::synchronize() {
    grouped_->forget_offsets();  // the host may now write device memory the prefetched offsets came from
    cuda_check(cudaStreamSynchronize(stream_));
    check_errors();
}

void CudaBackend::check_errors() {
    int word = 0;
    cuda_check(cudaMemcpyAsync(&word, error_word_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
    cuda_check(cudaStreamSynchronize(stream_));
    if (word == 0) return;
    cuda_check(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_));
    std::string what;
    if (word & CUDA_ERR_TOKEN_RANGE) what += " a token outside the vocabulary (embedding);";
    if (word & CUDA_ERR_TARGET_RANGE) what += " a target outside the vocabulary (cross-entropy);";
    if (word & CUDA_ERR_EXPERT_RANGE) what += " an expert index outside [0, n_experts) (moe_dispatch);";
    if (word & CUDA_ERR_OFFSETS) what += " decreasing expert offsets (moe_matmul);";
    fail("CUDA backend: kernels found{} (error word {:#x})", what, word);
}

void CudaBackend::copy_to_device(void* dst, const void* src, int64_t bytes) {
    check_nonneg("copy_to_device bytes", bytes);
    grouped_->forget_offsets();
    if (bytes == 0) return;
    // Pageable sources are staged before the call returns; pinned ones are read asynchronously.
    cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, stream_));
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost)
        cuda_check(cudaStreamSynchronize(stream_));
    cudaGetLastError();
}

void CudaBackend::copy_to_host(void* dst, const void* src, int64_t bytes) {
    check_nonneg("copy_to_host bytes", bytes);
    if (bytes > 0) cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToHost, stream_));
    // a read writes no device memory: the prefetched expert offsets stay valid (the forward's loss
    // read would otherwise send every MoE block's backward through a synchronous copy)
    cuda_check(cudaStreamSynchronize(stream_));
    check_errors();
}

void CudaBackend::set_matmul_workspace(void* workspace, int64_t bytes) { mm_->set_workspace(workspace, bytes); }

void CudaBackend::matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) {
    mm_->run(c, a, b, s, stream_);
}

void CudaBackend::embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                                    int64_t seq_len, int64_t channels, int64_t vocab_rows) {
    SKEW_NVTX_RANGE("embedding_forward");
    cuda::embedding_forward(out, tokens, wte, wpe, batch, seq_len, channels, vocab_rows, error_word_, stream_);
}

void CudaBackend::embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens,
                                     int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab_rows) {
    SKEW_NVTX_RANGE("embedding_backward");
    check_nonneg("embedding_backward batch", batch);
    check_nonneg("embedding_backward seq_len", seq_len);
    void* s = scratch(embedding_backward_scratch_bytes(batch, seq_len, vocab_rows));
    cuda::embedding_backward(dwte, dwpe, dout, tokens, batch, seq_len, channels, vocab_rows, error_word_, s, stream_);
}

void CudaBackend::layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight,
                                    const float* bias, int64_t n_rows, int64_t channels, float eps) {
    cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, n_rows, channels, eps, stream_);
}

void CudaBackend::layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                     const float* weight, const float* mean, const float* rstd, int64_t n_rows,
                                     int64_t channels, bool accumulate_dinp) {
    check_nonneg("layernorm_backward n_rows", n_rows);
    check_nonneg("layernorm_backward channels", channels);
    void* s = (dweight || dbias) ? scratch(layernorm_backward_scratch_bytes(n_rows, channels)) : nullptr;
    cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, n_rows, channels, accumulate_dinp, s,
                             stream_);
}

void CudaBackend::rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows,
                                  int64_t channels, float eps) {
    cuda::rmsnorm_forward(out, rstd, inp, weight, n_rows, channels, eps, stream_);
}

void CudaBackend::rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                                   const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp) {
    check_nonneg("rmsnorm_backward n_rows", n_rows);
    check_nonneg("rmsnorm_backward channels", channels);
    void* s = dweight ? scratch(cuda_ws::rmsnorm_backward_scratch_bytes(n_rows, channels)) : nullptr;
    cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, n_rows, channels, accumulate_dinp, s, stream_);
}

void CudaBackend::bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels) {
    cuda::bias_add_forward(out, bias, n_rows, channels, stream_);
}

void CudaBackend::bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels) {
    check_nonneg("bias_add_backward n_rows", n_rows);
    check_nonneg("bias_add_backward channels", channels);
    void* s = scratch(cuda_ws::bias_add_backward_scratch_bytes(n_rows, channels));
    cuda::bias_add_backward(dbias, dout, n_rows, channels, s, stream_);
}

void CudaBackend::rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0,
                       float theta, bool inverse) {
    if (head_dim <= 0 || head_dim % 2 != 0) fail("rope: head_dim {} is not a positive even number", head_dim);
    cuda::rope(x, batch, seq_len, n_heads, head_dim, pos0, theta, inverse, stream_);
}

void CudaBackend::attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                                    const AttentionShape& s) {
    SKEW_NVTX_RANGE("attention_forward");
    cuda::attention_forward(out, lse, q, k, v, s, stream_);
}

void CudaBackend::attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                                     const bf16* v, const bf16* out, const float* lse, const AttentionShape& s) {
    SKEW_NVTX_RANGE("attention_backward");
    check_nonneg("attention_backward batch", s.batch);
    check_nonneg("attention_backward seq_len", s.seq_len);
    void* sc = scratch(attention_backward_scratch_bytes(s));
    cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s, sc, stream_);
}

void CudaBackend::swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n) {
    cuda::swiglu_forward(h, a, b, n, stream_);
}

void CudaBackend::swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n) {
    cuda::swiglu_backward(da, db, dh, a, b, n, stream_);
}

void CudaBackend::sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                                       bool accumulate) {
    cuda::sigmoid_gate_forward(out, logit, s, n_rows, channels, accumulate, stream_);
}

void CudaBackend::sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s,
                                        int64_t n_rows, int64_t channels) {
    cuda::sigmoid_gate_backward(ds, dlogit, dout, logit, s, n_rows, channels, stream_);
}

void CudaBackend::moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts,
                                     float* balance_loss, float* z_loss, float* mean_probs, const float* logits,
                                     const RouterShape& s, const RouterOptions& o) {
    SKEW_NVTX_RANGE("moe_router_forward");
    if (s.n_experts <= 0 || s.n_tokens < 0) fail("moe_router_forward: n_experts must be positive, got {}", s.n_experts);
    void* sc = scratch(moe_router_forward_scratch_bytes(s));
    cuda::moe_router_forward(probs, expert_idx, gates, counts, balance_loss, z_loss, mean_probs, logits, s, o, sc,
                             stream_);
}

void CudaBackend::moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                                      const int32_t* expert_idx, const float* gates, const int64_t* counts,
                                      float d_balance, float d_z, const RouterShape& s, const RouterOptions& o) {
    SKEW_NVTX_RANGE("moe_router_backward");
    cuda::moe_router_backward(dlogits, dgates, logits, probs, expert_idx, gates, counts, d_balance, d_z, s, o, stream_);
}

void CudaBackend::moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets,
                               const int32_t* expert_idx, int64_t n_tokens, int64_t top_k, int64_t n_experts) {
    SKEW_NVTX_RANGE("moe_dispatch");
    check_nonneg("moe_dispatch n_tokens", n_tokens);
    if (top_k < 1 || n_experts < 1) fail("moe_dispatch: top_k {} and n_experts {} must be positive", top_k, n_experts);
    void* sc = scratch(moe_dispatch_scratch_bytes(n_tokens, top_k, n_experts));
    cuda::moe_dispatch(sorted_to_copy, copy_to_sorted, offsets, expert_idx, n_tokens, top_k, n_experts, error_word_, sc,
                       stream_);
    // the grouped products of this dispatch read the offsets on the host: one asynchronous copy now
    grouped_->prefetch_offsets(offsets, n_experts, stream_);
}

void CudaBackend::moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens,
                                     int64_t top_k, int64_t channels) {
    cuda::moe_gather_forward(xs, x, sorted_to_copy, n_tokens, top_k, channels, stream_);
}

void CudaBackend::moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens,
                                      int64_t top_k, int64_t channels, bool accumulate) {
    cuda::moe_gather_backward(dx, dxs, copy_to_sorted, n_tokens, top_k, channels, accumulate, stream_);
}

void CudaBackend::moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                                     int64_t n_experts, int64_t in_features, int64_t out_features) {
    SKEW_NVTX_RANGE("moe_matmul_forward");
    void* sc =
        grouped_->algo() == GroupedGemmAlgo::CUBLAS_GROUPED ? scratch(moe_matmul_scratch_bytes(n_experts)) : nullptr;
    grouped_->forward(out, inp, weight, offsets, n_experts, in_features, out_features, sc, stream_);
}

void CudaBackend::moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                                      ConstTensorRef weight, const int64_t* offsets, int64_t n_experts,
                                      int64_t in_features, int64_t out_features, bool accumulate_dinp) {
    SKEW_NVTX_RANGE("moe_matmul_backward");
    void* sc =
        grouped_->algo() == GroupedGemmAlgo::CUBLAS_GROUPED ? scratch(moe_matmul_scratch_bytes(n_experts)) : nullptr;
    grouped_->backward(dinp, dweight, dout, inp, weight, offsets, n_experts, in_features, out_features, accumulate_dinp,
                       sc, stream_);
}

void CudaBackend::moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted,
                                      int64_t n_tokens, int64_t top_k, int64_t channels) {
    cuda::moe_combine_forward(out, ys, gates, copy_to_sorted, n_tokens, top_k, channels, stream_);
}

void CudaBackend::moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                                       const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                                       int64_t channels) {
    cuda::moe_combine_backward(dys, dgates, dout, ys, gates, copy_to_sorted, n_tokens, top_k, channels, stream_);
}

void CudaBackend::residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n) {
    cuda::residual_forward(out, a, b, n, stream_);
}

void CudaBackend::accumulate(TensorRef dst, ConstTensorRef src, int64_t n) { cuda::accumulate(dst, src, n, stream_); }

void CudaBackend::scale(TensorRef x, float factor, int64_t n) { cuda::scale(x, factor, n, stream_); }

void CudaBackend::zero(TensorRef x, int64_t n) { cuda::zero(x, n, stream_); }

void CudaBackend::init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std) {
    check_nonneg("init_normal numel", n);
    cuda::init_normal(x, n, seed, tensor, std, stream_);
}

void CudaBackend::convert(TensorRef dst, ConstTensorRef src, int64_t n) { cuda::convert(dst, src, n, stream_); }

void CudaBackend::dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld,
                                 float alpha) {
    cuda::dot_accumulate(out, a, b, rows, cols, ld, alpha, stream_);
}

double CudaBackend::sum_squares(std::span<const BufferRef> buffers) {
    SKEW_NVTX_RANGE("grad_norm sum_squares");
    for (const BufferRef& b : buffers) check_nonneg("sum_squares numel", b.numel);
    void* s = scratch(sum_squares_scratch_bytes(buffers));
    const double total = cuda::sum_squares(buffers, s, stream_);
    check_errors();
    return total;
}

void CudaBackend::cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                                        int64_t vocab_size, int64_t padded_vocab_size) {
    cuda::cross_entropy_forward(losses, logits, targets, n_tokens, vocab_size, padded_vocab_size, error_word_, stream_);
}

void CudaBackend::cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                                         int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) {
    const float sc = n_tokens > 0 ? dloss / float(n_tokens) : 0.0f;
    cuda::cross_entropy_backward_scaled(dlogits, logits, targets, sc, n_tokens, vocab_size, padded_vocab_size,
                                        error_word_, stream_);
}

int64_t CudaBackend::lm_head_workspace_bytes(const ClassifierShape& s) const {
    return cuda::lm_head_workspace_bytes(s);
}

void CudaBackend::lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                                        ConstTensorRef wte, const int32_t* targets, float dloss,
                                        const ClassifierShape& s, void* workspace) {
    SKEW_NVTX_RANGE("lm_head_cross_entropy");
    cuda::lm_head_cross_entropy(*mm_, mean_loss, losses, dx, dwte, x, wte, targets, dloss, s, workspace, error_word_,
                                stream_);
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace skew::cuda
