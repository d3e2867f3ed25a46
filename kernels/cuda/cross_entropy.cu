// CUDA cross-entropy over the padded vocabulary, and the fused tied LM head that runs it in token
// chunks (docs/design.md: padded vocabulary 50,304, tied head; llm.c fused_classifier.cuh). One block per
// token row; block reductions are fixed trees, so losses are deterministic. CPU twin:
// kernels/cpu/cross_entropy.cpp.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 512;

// Row log-sum-exp over the first V columns; every thread gets it. One pass over the row (online
// max and rescaled sum per thread, then the block's max and the rescaled partial sums), so the
// fp32 logits are read once here instead of twice (the head is bound by these reads).
__device__ float row_lse(const float* __restrict__ x, int64_t V, float* smem) {
    float m = -INFINITY, s = 0.0f;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
        const float xv = x[v];
        if (xv > m) {
            s = s * expf(m - xv) + 1.0f;
            m = xv;
        } else {
            s += expf(xv - m);
        }
    }
    const float mx = block_max(m, smem);
    float part = m == -INFINITY ? 0.0f : s * expf(m - mx);
    part = block_sum(part, smem);
    return mx + logf(part);
}

__global__ void cross_entropy_forward_kernel(float* __restrict__ losses, const float* __restrict__ logits,
                                             const int32_t* __restrict__ targets, int64_t V, int64_t Vp,
                                             int* error_word) {
    __shared__ float smem[32];
    const int64_t i = blockIdx.x;
    const float* x = logits + i * Vp;
    const float lse = row_lse(x, V, smem);
    if (threadIdx.x == 0) {
        const int32_t t = targets[i];
        if (t < 0 || t >= V) {
            if (error_word) atomicOr(error_word, CUDA_ERR_TARGET_RANGE);
            losses[i] = NAN;
        } else {
            losses[i] = lse - x[t];
        }
    }
}

// dlogits = scale·(softmax - onehot), 0 in the padding; optional per-token loss. dlogits may alias
// logits (TD = float): every read of the row happens before the reductions' last barrier.
template <class TD>
__global__ void cross_entropy_backward_kernel(TD* dlogits, float* losses, const float* logits,
                                              const int32_t* __restrict__ targets, float scale, int64_t V, int64_t Vp,
                                              int* error_word) {
    __shared__ float smem[32];
    const int64_t i = blockIdx.x;
    const float* x = logits + i * Vp;
    const int32_t t = targets[i];
    const bool bad = t < 0 || t >= V;
    const float x_target = bad ? 0.0f : x[t];  // read before any write of the row
    const float lse = row_lse(x, V, smem);
    if (threadIdx.x == 0) {
        if (bad && error_word) atomicOr(error_word, CUDA_ERR_TARGET_RANGE);
        if (losses) losses[i] = bad ? NAN : lse - x_target;
    }
    TD* d = dlogits + i * Vp;
    for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = 0.0f;
        if (v < V) g = scale * (expf(x[v] - lse) - (v == t ? 1.0f : 0.0f));
        st(d + v, g);
    }
}

__global__ void mean_loss_kernel(float* __restrict__ mean_loss, const float* __restrict__ losses, int64_t n) {
    __shared__ double smem[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += double(losses[i]);
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) *mean_loss = float(acc / double(n));
}

void check_vocab(const char* op, int64_t n, int64_t V, int64_t Vp) {
    check_nonneg(op, n);
    if (V <= 0 || Vp < V) throw_op_error(op, "vocab_size must be positive and at most padded_vocab_size");
}

using cuda_ws::align256;

bool bf16_path(ConstTensorRef x, ConstTensorRef wte) {
    return x.type == ScalarType::BF16 && wte.type == ScalarType::BF16;
}

}  // namespace

// ---- launchers

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                           int64_t vocab_size, int64_t padded_vocab_size, int* error_word, cudaStream_t stream) {
    check_vocab("cross_entropy_forward", n_tokens, vocab_size, padded_vocab_size);
    if (n_tokens == 0) return;
    cross_entropy_forward_kernel<<<unsigned(n_tokens), kThreads, 0, stream>>>(losses, logits, targets, vocab_size,
                                                                              padded_vocab_size, error_word);
    cuda_check_kernel("cross_entropy_forward_kernel");
}

void cross_entropy_backward_scaled(float* dlogits, const float* logits, const int32_t* targets, float grad_scale,
                                   int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size, int* error_word,
                                   cudaStream_t stream) {
    check_vocab("cross_entropy_backward", n_tokens, vocab_size, padded_vocab_size);
    if (n_tokens == 0) return;
    cross_entropy_backward_kernel<float><<<unsigned(n_tokens), kThreads, 0, stream>>>(
        dlogits, nullptr, logits, targets, grad_scale, vocab_size, padded_vocab_size, error_word);
    cuda_check_kernel("cross_entropy_backward_kernel");
}

int64_t lm_head_chunk_tokens(const ClassifierShape& s) {
    return cuda_ws::lm_head_layout(s.n_tokens, s.d_model, s.padded_vocab_size, s.bf16_operands).chunk_tokens;
}

int64_t lm_head_workspace_bytes(const ClassifierShape& s) {
    return cuda_ws::lm_head_workspace_bytes(s.n_tokens, s.d_model, s.padded_vocab_size, s.bf16_operands);
}

void lm_head_cross_entropy(Matmul& mm, float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                           ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                           void* workspace, int* error_word, cudaStream_t stream) {
    const int64_t n = s.n_tokens, C = s.d_model, V = s.vocab_size, Vp = s.padded_vocab_size;
    check_vocab("lm_head_cross_entropy", n, V, Vp);
    check_nonneg("lm_head_cross_entropy d_model", C);
    const bool use_bf16 = bf16_path(x, wte);
    if (use_bf16 != s.bf16_operands || (!use_bf16 && (x.type != ScalarType::F32 || wte.type != ScalarType::F32)))
        throw_op_error("lm_head_cross_entropy",
                       "x and wte must both be bf16 or both fp32, as ClassifierShape::bf16_operands says (it sizes the "
                       "workspace)");
    if (n == 0) {
        if (mean_loss) cuda_check(cudaMemsetAsync(mean_loss, 0, sizeof(float), stream));
        return;
    }
    if (!workspace) throw_op_error("lm_head_cross_entropy", "null workspace (size from lm_head_workspace_bytes)");
    const cuda_ws::LmHeadLayout layout = cuda_ws::lm_head_layout(n, C, Vp, use_bf16);
    const int64_t chunk = layout.chunk_tokens;
    const bool backward = dx || dwte;
    // whole dlogits: the chunks write their rows of one (n, Vp) bf16 dlogits, then dx and dwte are
    // one product each (k = n for dwte)
    const bool whole = backward && layout.whole_dlogits;
    char* base = static_cast<char*>(workspace);
    float* logits = reinterpret_cast<float*>(base);  // (chunk, Vp)
    base += align256(chunk * Vp * 4);
    char* region = base;  // the dlogits region (kernels/cuda/workspace_sizes.h)
    base += layout.dlogits_region_bytes;
    float* local_losses = reinterpret_cast<float*>(base);  // (n)
    if (!losses) losses = local_losses;
    bf16* dlogits16 = reinterpret_cast<bf16*>(region);  // (chunk or n, Vp), bf16 path
    // the fp32 dwte accumulator (accumulator layout): after the chunk's bf16 dlogits, or at the start
    // of the region with fp32 operands (their dlogits are written in place over the logits)
    float* dwte32 = reinterpret_cast<float*>(use_bf16 ? region + align256(chunk * Vp * 2) : region);

    TensorRef dw = dwte;
    // A bf16 dwte is rounded once: over several chunks through the fp32 accumulator; with one
    // chunk or whole dlogits the single product adds into it directly (fp32 accumulation).
    const bool accumulator = dwte && dwte.type == ScalarType::BF16 && chunk < n && !whole;
    if (accumulator) {
        zero(TensorRef(dwte32), Vp * C, stream);
        dw = TensorRef(dwte32);
    }
    const float scale = dloss / float(n);
    const int64_t xb = scalar_type_bytes(x.type);
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        const int64_t m = std::min(chunk, n - i0);
        const ConstTensorRef xc(static_cast<const char*>(x.data) + i0 * C * xb, x.type);
        mm.run(TensorRef(logits), xc, wte, MatmulShape{m, Vp, C, false, true}, stream);
        if (!backward) {
            cross_entropy_forward_kernel<<<unsigned(m), kThreads, 0, stream>>>(losses + i0, logits, targets + i0, V, Vp,
                                                                               error_word);
            cuda_check_kernel("cross_entropy_forward_kernel");
            continue;
        }
        bf16* dlog16 = whole ? dlogits16 + i0 * Vp : dlogits16;
        TensorRef dlog = use_bf16 ? TensorRef(dlog16) : TensorRef(logits);
        if (use_bf16)
            cross_entropy_backward_kernel<bf16><<<unsigned(m), kThreads, 0, stream>>>(
                dlog16, losses + i0, logits, targets + i0, scale, V, Vp, error_word);
        else
            cross_entropy_backward_kernel<float><<<unsigned(m), kThreads, 0, stream>>>(
                logits, losses + i0, logits, targets + i0, scale, V, Vp, error_word);
        cuda_check_kernel("cross_entropy_backward_kernel");
        if (whole) continue;  // the products run once over all tokens below
        if (dx) {
            const TensorRef dxc(static_cast<char*>(dx.data) + i0 * C * scalar_type_bytes(dx.type), dx.type);
            mm.run(dxc, dlog, wte, MatmulShape{m, C, Vp}, stream);
        }
        if (dw) mm.run(dw, dlog, xc, MatmulShape{Vp, C, m, true, false, 1.0f, 1.0f}, stream);
    }
    if (whole) {
        if (dx) mm.run(dx, TensorRef(dlogits16), wte, MatmulShape{n, C, Vp}, stream);
        if (dwte) mm.run(dwte, TensorRef(dlogits16), x, MatmulShape{Vp, C, n, true, false, 1.0f, 1.0f}, stream);
    }
    if (accumulator) accumulate(dwte, ConstTensorRef(static_cast<const float*>(dwte32)), Vp * C, stream);
    if (mean_loss) {
        mean_loss_kernel<<<1, 1024, 0, stream>>>(mean_loss, losses, n);
        cuda_check_kernel("mean_loss_kernel");
    }
}

}  // namespace skew::cuda
