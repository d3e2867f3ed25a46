// The backend ops interface: every op the MoE transformer of docs/design.md ("The paper's model") needs,
// forward and backward. The model (model/) is written once against `Backend`; the CPU reference
// (kernels/cpu/) and the CUDA backend (kernels/cuda/) are its two implementations.
//
// Conventions for every method:
// - Pointers are backend memory (host memory for the CPU backend, device memory for CUDA). Tensors
//   are dense and row-major; the shape is written next to each argument, outermost first.
// - Destination first, then inputs, then shapes/options. A `float* loss` style scalar output is one
//   element of backend memory.
// - Activations and activation gradients are bf16 (accumulated in fp32 inside every op); LayerNorm
//   parameters, the router and its logits are fp32; gradients of bf16 weights are bf16 or fp32 (the
//   config's grad_dtype) and are passed as TensorRef.
// - Parameter gradients ACCUMULATE (+=) into their buffer, so microbatches sum; the caller zeroes
//   them once per step. Activation gradients OVERWRITE unless an `accumulate` flag says otherwise.
// - Element counts and offsets are int64_t. Bad arguments throw skew::Error (engine/error.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/common/bf16.h"

namespace skew {

// ---- tensor references

/// Element type of a tensor where an op accepts more than one.
enum class ScalarType : uint8_t { BF16, F32 };

/// Bytes per element of a ScalarType.
inline int64_t scalar_type_bytes(ScalarType t) { return t == ScalarType::BF16 ? 2 : 4; }

/// A writable tensor of either element type: its data pointer and dtype (shape given by the op).
struct TensorRef {
    void* data = nullptr;
    ScalarType type = ScalarType::F32;

    TensorRef() = default;
    TensorRef(bf16* p) : data(p), type(ScalarType::BF16) {}
    TensorRef(float* p) : data(p), type(ScalarType::F32) {}
    TensorRef(void* p, ScalarType t) : data(p), type(t) {}
    TensorRef(std::nullptr_t) {}
    explicit operator bool() const { return data != nullptr; }
};

/// A read-only tensor of either element type.
struct ConstTensorRef {
    const void* data = nullptr;
    ScalarType type = ScalarType::F32;

    ConstTensorRef() = default;
    ConstTensorRef(const bf16* p) : data(p), type(ScalarType::BF16) {}
    ConstTensorRef(const float* p) : data(p), type(ScalarType::F32) {}
    ConstTensorRef(const void* p, ScalarType t) : data(p), type(t) {}
    ConstTensorRef(TensorRef t) : data(t.data), type(t.type) {}
    ConstTensorRef(std::nullptr_t) {}
    explicit operator bool() const { return data != nullptr; }
};

/// One buffer of a multi-buffer reduction (global grad-norm): data and element count.
struct BufferRef {
    ConstTensorRef data;
    int64_t numel = 0;
};

// ---- shapes and options

/// C(m, n) = alpha * op(A) · op(B) + beta * C, all row-major. op(A) is (m, k): A is stored (m, k),
/// or (k, m) when trans_a. op(B) is (k, n): B is stored (k, n), or (n, k) when trans_b.
/// beta = 1 accumulates into C (weight gradients over microbatches); beta = 0 ignores C's contents.
struct MatmulShape {
    int64_t m = 0, n = 0, k = 0;
    bool trans_a = false;
    bool trans_b = false;
    float alpha = 1.0f;
    float beta = 0.0f;
};

/// Causal GQA attention. Layouts (row-major):
///   q, out, dq, dout: (batch, seq_len, n_heads, head_dim)     — the Q projection's output rows
///   k, v, dk, dv:     (batch, keys(), n_kv_heads, head_dim)   — the K / V projections' output rows
///   lse:              (batch, n_heads, seq_len) fp32, natural-log log-sum-exp of the scaled scores
/// Query head h reads KV head h / (n_heads / n_kv_heads) (grouped, not tiled); scale 1/sqrt(head_dim).
/// kv_len > seq_len (a KV-cache step, model/inference.h): the queries are the last seq_len of kv_len
/// positions, query row t at position kv_len - seq_len + t reading keys 0 .. that position; the
/// forward's work is O(seq_len * kv_len), not O(kv_len^2). The backward takes kv_len = seq_len only.
struct AttentionShape {
    int64_t batch = 0, seq_len = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
    int64_t kv_len = 0;  // keys and values per sequence, >= seq_len; 0: seq_len
    int64_t keys() const { return kv_len > 0 ? kv_len : seq_len; }
};

/// The router of one MoE block (docs/design.md, "Router (fp32)").
struct RouterShape {
    int64_t n_tokens = 0;   // tokens in the microbatch (batch * seq_len)
    int64_t n_experts = 0;  // E
    int64_t top_k = 2;      // k (distinct experts per token)
};

/// Router options. Noise N(0, noise_std^2) is added to logit (t, e) in training from Philox keyed
/// by (seed, PHILOX_STREAM_ROUTER_NOISE, step, tensor, noise_offset + t * n_experts + e); the
/// caller makes noise_offset distinct per microbatch (e.g. microbatch * n_tokens * n_experts) and
/// tensor distinct per MoE block. noise_std = 0 disables noise (eval, tests).
struct RouterOptions {
    float noise_std = 0.0f;  // 0.5 in training (the paper)
    uint64_t seed = 0;
    uint32_t step = 0;
    uint32_t tensor = 0;
    uint64_t noise_offset = 0;
    float balance_alpha = 0.05f;  // α of the Switch balance loss α·E·Σ p̄_i f_i
    float z_coef = 1e-4f;         // coefficient of the z-loss coef·mean(logsumexp(clean logits)^2)
    bool normalize_top_k = true;  // k > 1: the chosen probabilities renormalized to sum 1 (else the probabilities)
};

/// Tied LM head + cross-entropy over the padded vocabulary.
struct ClassifierShape {
    int64_t n_tokens = 0;           // N = batch * seq_len
    int64_t d_model = 0;            // C
    int64_t vocab_size = 0;         // V: real tokens; columns V..Vp-1 are padding, probability 0
    int64_t padded_vocab_size = 0;  // Vp: rows of the embedding table
    bool bf16_operands = true;      // x and wte bf16 (the model's head); false: fp32 (sizes the workspace)
};

/// Memory of the run's arena that a backend uses for its own work (the memory plan's ws.* buffers,
/// engine/memory_plan.h backend_workspace); nullptr / 0: none, the backend uses its own.
struct BackendWorkspaceMemory {
    void* library = nullptr;  // matrix-library workspace (cuBLASLt), library_bytes bytes
    int64_t library_bytes = 0;
    void* scratch = nullptr;  // op scratch (sorts, reduction partials), scratch_bytes bytes
    int64_t scratch_bytes = 0;
    float* widen = nullptr;  // fp32 widening buffer of mixed-dtype products, widen_elems elements
    int64_t widen_elems = 0;
};

// ---- the interface

/// The ops interface. One instance per device; methods are not reentrant across threads.
struct Backend {
    virtual ~Backend() = default;

    /// Human-readable name ("cpu", "cuda").
    virtual const char* name() const = 0;

    // ---- device memory

    /// Whether the backend's memory is device memory (the arena is allocated on the device).
    virtual bool device_memory() const { return false; }
    /// Use `ws` (memory of the run's arena) for the backend's own work until the next call; an empty
    /// BackendWorkspaceMemory returns to backend-owned memory. Default: nothing to bind (CPU).
    virtual void bind_workspace(const BackendWorkspaceMemory& ws) { (void)ws; }
    /// Device memory in use (bytes, the whole device), or -1 when the backend has no device.
    virtual int64_t device_memory_used_bytes() const { return -1; }
    /// Free device memory (bytes), or -1 when the backend has no device or the query fails.
    virtual int64_t device_memory_free_bytes() const { return -1; }
    /// `bytes` bytes of zeroed device memory for an arena (backends with device_memory()), released
    /// with free_device_memory. `what` names the memory for the error (e.g. "the 1.25 GiB plan of
    /// optimizer 'adamw'"). Throws skew::Error with the device's free memory when it does not fit, or
    /// on a backend without device memory.
    virtual void* allocate_device_memory(int64_t bytes, const std::string& what);
    /// Release memory from allocate_device_memory; never throws.
    virtual void free_device_memory(void* p) noexcept { (void)p; }

    // ---- capabilities (what callers above kernels/ may rely on, instead of the backend's name)

    /// The CUDA stream (a cudaStream_t) every op of this backend is queued on, for CUDA code outside
    /// kernels/ that works on the backend's memory in order with its ops (the optimizer kernels,
    /// NCCL); null for a backend that does not run CUDA (runs_cuda() false).
    virtual void* cuda_stream() const { return nullptr; }
    /// Whether the backend runs its ops as CUDA kernels on cuda_stream().
    virtual bool runs_cuda() const { return false; }
    /// Whether the backend's matmul widens bf16 weights to fp32 at every call (the CPU), so that a
    /// caller multiplying by the same weights many times (decoding, model/inference.h) gains by
    /// keeping fp32 copies and passing those.
    virtual bool matmul_widens_bf16_weights() const { return false; }

    // ---- host <-> backend memory

    /// Copy `bytes` bytes from host memory `src` to backend memory `dst`. Returns once `src` may be
    /// reused (the copy itself may still be queued on a device backend). CPU: memcpy. Errors:
    /// negative bytes, a failed device copy (skew::Error).
    virtual void copy_to_device(void* dst, const void* src, int64_t bytes) = 0;

    /// Copy `bytes` bytes from backend memory `src` to host memory `dst`, after all queued work
    /// (synchronizes a device backend, then reports errors its kernels recorded). CPU: memcpy.
    virtual void copy_to_host(void* dst, const void* src, int64_t bytes) = 0;

    /// Wait for all queued work and report errors the kernels recorded (skew::Error). CPU: no-op.
    virtual void synchronize() = 0;

    /// Initialize n elements of backend memory x (bf16: rounded to nearest even; fp32) with
    /// std * N(0, 1), element i drawing init_normal_value(seed, tensor, i) (kernels/common/init_math.h:
    /// Philox stream PHILOX_STREAM_INIT, step 0). Default: drawn on the host in chunks and copied;
    /// the CUDA backend draws on the device (the same values up to an ulp of logf / cosf).
    virtual void init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std);

    // ---- matmul (fp32 accumulation)

    /// General matrix product C = alpha·op(A)·op(B) + beta·C (see MatmulShape). Each operand may be
    /// bf16 or fp32 independently (bf16 operands are widened exactly, accumulation is fp32; a bf16
    /// C is read, accumulated in fp32 and rounded to nearest even once). fp32·fp32 is the router's
    /// variant. Errors: negative sizes, null pointers with nonzero sizes.
    virtual void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s) = 0;

    /// Linear layer forward: out (n_rows, out_features) = inp (n_rows, in_features) ·
    /// weight (out_features, in_features)^T, + out when accumulate. No bias (docs/design.md).
    void matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, int64_t n_rows, int64_t in_features,
                        int64_t out_features, bool accumulate = false) {
        matmul(out, inp, weight,
               MatmulShape{n_rows, out_features, in_features, false, true, 1.0f, accumulate ? 1.0f : 0.0f});
    }

    /// Linear layer backward. dinp (n_rows, in_features) = dout (n_rows, out_features) · weight
    /// (overwritten, or += when accumulate_dinp; skipped when dinp is null); dweight (out_features,
    /// in_features) += dout^T · inp (always accumulates; skipped when null).
    void matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                         ConstTensorRef weight, int64_t n_rows, int64_t in_features, int64_t out_features,
                         bool accumulate_dinp = false) {
        if (dinp)
            matmul(dinp, dout, weight,
                   MatmulShape{n_rows, in_features, out_features, false, false, 1.0f, accumulate_dinp ? 1.0f : 0.0f});
        if (dweight)
            matmul(dweight, dout, inp, MatmulShape{out_features, in_features, n_rows, true, false, 1.0f, 1.0f});
    }

    // ---- embedding

    /// Token + learned position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] (summed
    /// in fp32, rounded once). out (batch, seq_len, C) bf16; tokens (batch, seq_len) int32 in
    /// [0, vocab_rows); wte (vocab_rows, C); wpe (>= seq_len, C), or null: no position rows (a model
    /// with rotary positions). Errors: a token out of range.
    virtual void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                                   int64_t seq_len, int64_t channels, int64_t vocab_rows) = 0;

    /// Embedding backward, deterministic (fixed summation order, no atomics): dwte[tokens[b,t]] +=
    /// dout[b,t]; dwpe[t] += Σ_b dout[b,t]. dout (batch, seq_len, C) bf16; dwte (vocab_rows, C),
    /// dwpe (>= seq_len, C), bf16 or fp32, accumulated. Either gradient may be null (skipped).
    virtual void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens,
                                    int64_t batch, int64_t seq_len, int64_t channels, int64_t vocab_rows) = 0;

    // ---- LayerNorm (with bias, fp32 parameters)

    /// out = (inp - mean) * rstd * weight + bias per row, rstd = 1/sqrt(var + eps) (biased
    /// variance). out, inp (n_rows, C) bf16; weight, bias (C) fp32; mean, rstd (n_rows) fp32 saved
    /// for backward (either may be null).
    virtual void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const float* weight,
                                   const float* bias, int64_t n_rows, int64_t channels, float eps = 1e-5f) = 0;

    /// LayerNorm backward. dinp (n_rows, C) bf16: overwritten, or += when accumulate_dinp (the
    /// residual stream's gradient); dweight, dbias (C) fp32 accumulated (null: skipped). dout, inp
    /// (n_rows, C) bf16; mean, rstd from the forward.
    virtual void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                    const float* weight, const float* mean, const float* rstd, int64_t n_rows,
                                    int64_t channels, bool accumulate_dinp = false) = 0;

    // ---- RMSNorm (fp32 weight, no bias; docs/architectures.md)

    /// out = x * rstd * weight per row, rstd = 1/sqrt(mean(x^2) + eps) (no mean subtraction, no
    /// bias: Zhang and Sennrich 2019, as Llama-family models). out, inp (n_rows, C) bf16; weight (C)
    /// fp32; rstd (n_rows) fp32 saved for backward (may be null). One rounding to bf16 per output.
    virtual void rmsnorm_forward(bf16* out, float* rstd, const bf16* inp, const float* weight, int64_t n_rows,
                                 int64_t channels, float eps) = 0;

    /// RMSNorm backward: dinp = rstd * (dnorm - norm * mean(dnorm * norm)), dnorm = dout * weight,
    /// norm = x * rstd; dinp (n_rows, C) bf16 overwritten, or += when accumulate_dinp; dweight (C)
    /// fp32 accumulated (null: skipped), summed over rows in a fixed order. rstd from the forward.
    virtual void rmsnorm_backward(bf16* dinp, float* dweight, const bf16* dout, const bf16* inp, const float* weight,
                                  const float* rstd, int64_t n_rows, int64_t channels,
                                  bool accumulate_dinp = false) = 0;

    // ---- bias of a linear layer (model.attention_bias; docs/architectures.md)

    /// out[r, c] += bias[c] in place: out (n_rows, C) bf16, bias (C) fp32; the sum in fp32, rounded
    /// to bf16 once (the q, k and v projections' biases).
    virtual void bias_add_forward(bf16* out, const float* bias, int64_t n_rows, int64_t channels) = 0;

    /// The bias's gradient: dbias[c] += Σ_r dout[r, c] (fp32, accumulated), the column sums of dout
    /// (n_rows, C) bf16 in an order fixed by the shape (deterministic run to run).
    virtual void bias_add_backward(float* dbias, const bf16* dout, int64_t n_rows, int64_t channels) = 0;

    // ---- rotary position embedding (RoPE)

    /// Rotates x (batch, seq_len, n_heads, head_dim) bf16 in place: token t of every sequence sits
    /// at position pos0 + t; lane i of each head pairs with lane i + head_dim/2 by the angle
    /// rope_angle(pos, i, head_dim, theta) (kernels/common/rope_math.h, the "rotate half" layout of
    /// Hugging Face Llama-family models). inverse: rotate back, which is the backward (a rotation's
    /// transpose is its inverse), applied to the gradient. Errors: odd head_dim.
    virtual void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0,
                      float theta, bool inverse = false) = 0;

    // ---- attention (causal, GQA)

    /// out = softmax(q·k^T / sqrt(head_dim) + causal mask) · v per (batch, head); saves lse.
    /// Shapes and layouts: AttentionShape. Errors: n_heads not a multiple of n_kv_heads, kv_len
    /// below seq_len.
    virtual void attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                                   const AttentionShape& s) = 0;

    /// Attention backward from the saved out and lse (scores recomputed). dq, dk, dv overwritten;
    /// dk and dv of KV head g sum over the query heads g·G .. g·G+G-1, G = n_heads / n_kv_heads.
    /// Errors: as the forward's, and kv_len other than 0 or seq_len.
    virtual void attention_backward(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                                    const bf16* v, const bf16* out, const float* lse, const AttentionShape& s) = 0;

    // ---- SwiGLU activation

    /// h = silu(a) * b elementwise (the inner product of w3(silu(w1 x) * w2 x)); h, a, b (n) bf16.
    virtual void swiglu_forward(bf16* h, const bf16* a, const bf16* b, int64_t n) = 0;

    /// da = dh * b * silu'(a), db = dh * silu(a); all (n) bf16, overwritten. In place allowed: da may
    /// be a and db may be b (each element's inputs are read before its outputs are written).
    virtual void swiglu_backward(bf16* da, bf16* db, const bf16* dh, const bf16* a, const bf16* b, int64_t n) = 0;

    // ---- sigmoid gate (the shared experts' gate of Qwen2-MoE; docs/architectures.md)

    /// out[r, c] = sigmoid(logit[r]) * s[r, c], or out[r, c] + that when accumulate (fp32, one
    /// rounding to bf16). out, s (n_rows, C) bf16, out not aliasing s; logit (n_rows) fp32 (= x · w_gate,
    /// a matmul with one output column). sigmoid as kernels/common/activations.h.
    virtual void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                                      bool accumulate = false) = 0;

    /// Its backward from dout (n_rows, C) bf16: ds[r, c] = g_r * dout[r, c] (bf16, overwritten) and
    /// dlogit[r] = g_r (1 - g_r) * Σ_c dout[r, c] s[r, c] (fp32, overwritten; the sum in an order fixed
    /// by C), g_r = sigmoid(logit[r]). Either output may be null (skipped).
    virtual void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s,
                                       int64_t n_rows, int64_t channels) = 0;

    // ---- MoE router (fp32)

    /// From the clean logits (n_tokens, E) fp32 (= x·Wr^T via matmul): noisy logits (training),
    /// probs = softmax(noisy) (n_tokens, E) fp32; top-k experts by probs, distinct, ties to the
    /// lower index: expert_idx (n_tokens, k) int32 in descending order of probability; gates
    /// (n_tokens, k) fp32, the chosen probabilities renormalized to sum 1 for k > 1 when
    /// o.normalize_top_k, else the probabilities themselves (always for k = 1: Switch Transformer;
    /// router_renormalizes_gates); counts (E) int64, the
    /// assignments per expert; balance_loss = α·E·Σ_i p̄_i·f_i (p̄ the mean of probs over tokens,
    /// f_i = counts_i / (n·k)); z_loss = coef·mean_t(logsumexp(clean logits_t)^2). mean_probs (E)
    /// fp32 p̄ is optional (null: skipped), for metrics. Errors: top_k < 1 or > E.
    virtual void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts,
                                    float* balance_loss, float* z_loss, float* mean_probs, const float* logits,
                                    const RouterShape& s, const RouterOptions& o) = 0;

    /// Gradient to the clean logits, overwritten: dlogits (n_tokens, E) fp32 from dgates
    /// (n_tokens, k) fp32 (through the renormalization and the softmax; the top-k choice is
    /// piecewise constant), plus d_balance times the balance loss's gradient (f held constant),
    /// plus d_z times the z-loss's gradient. d_balance and d_z are the loss weights of the aux
    /// losses in the total loss (1/accum_steps with gradient accumulation). dgates may be null
    /// (treated as zero). Inputs as saved by moe_router_forward.
    virtual void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                                     const int32_t* expert_idx, const float* gates, const int64_t* counts,
                                     float d_balance, float d_z, const RouterShape& s, const RouterOptions& o) = 0;

    // ---- MoE dispatch (dropless)

    /// Stable counting sort of the n_tokens·k token copies (copy j = t·k + slot) by expert:
    /// sorted_to_copy (n·k) int64, copy index at each sorted position (within one expert, copies in
    /// increasing j); copy_to_sorted (n·k) int64, its inverse; offsets (E+1) int64, expert e owns
    /// sorted rows offsets[e] .. offsets[e+1]-1. expert_idx (n, k) int32. Errors: index out of range.
    virtual void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets,
                              const int32_t* expert_idx, int64_t n_tokens, int64_t top_k, int64_t n_experts) = 0;

    /// Gather token rows into expert order: xs[p] = x[sorted_to_copy[p] / k]. xs (n·k, C), x (n, C).
    virtual void moe_gather_forward(bf16* xs, const bf16* x, const int64_t* sorted_to_copy, int64_t n_tokens,
                                    int64_t top_k, int64_t channels) = 0;

    /// dx[t] = Σ_slot dxs[copy_to_sorted[t·k + slot]] (slot order, deterministic); dx (n, C)
    /// overwritten or += when accumulate; dxs (n·k, C).
    virtual void moe_gather_backward(bf16* dx, const bf16* dxs, const int64_t* copy_to_sorted, int64_t n_tokens,
                                     int64_t top_k, int64_t channels, bool accumulate = false) = 0;

    /// Grouped expert linear layer: for every expert e, out[rows of e] = inp[rows of e] ·
    /// weight[e]^T. out (n_rows, out_features), inp (n_rows, in_features) in expert order; weight
    /// (E, out_features, in_features); offsets (E+1) from moe_dispatch (n_rows = offsets[E]).
    virtual void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                                    int64_t n_experts, int64_t in_features, int64_t out_features) = 0;

    /// Grouped linear backward: dinp[rows of e] = dout[rows of e] · weight[e] (overwritten, or +=
    /// when accumulate_dinp, e.g. the w2 branch of SwiGLU after the w1 branch; null skips);
    /// dweight[e] += dout[rows of e]^T · inp[rows of e] (accumulated; an expert with no rows gets
    /// nothing added, so its gradient stays zero; null skips).
    virtual void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                                     ConstTensorRef weight, const int64_t* offsets, int64_t n_experts,
                                     int64_t in_features, int64_t out_features, bool accumulate_dinp = false) = 0;

    /// Weighted combine: out[t] = Σ_slot gates[t, slot] · ys[copy_to_sorted[t·k + slot]] (fp32
    /// sum, slot order). out (n, C) bf16; ys (n·k, C) bf16 in expert order; gates (n, k) fp32.
    virtual void moe_combine_forward(bf16* out, const bf16* ys, const float* gates, const int64_t* copy_to_sorted,
                                     int64_t n_tokens, int64_t top_k, int64_t channels) = 0;

    /// Combine backward: dys[copy_to_sorted[t·k+s]] = gates[t,s]·dout[t] (overwritten); dgates[t,s]
    /// = <dout[t], ys[copy_to_sorted[t·k+s]]> (overwritten, fp32). Either output may be null.
    virtual void moe_combine_backward(bf16* dys, float* dgates, const bf16* dout, const bf16* ys, const float* gates,
                                      const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                                      int64_t channels) = 0;

    // ---- elementwise and reductions

    /// Residual add: out = a + b (n) bf16, summed in fp32, rounded once. out may alias a or b.
    virtual void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n) = 0;

    /// dst += src elementwise (n); dst and src bf16 or fp32 independently (fp32 sum, one rounding).
    virtual void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) = 0;

    /// x *= factor in place (n), bf16 or fp32 (gradient clipping, 1/accum scaling).
    virtual void scale(TensorRef x, float factor, int64_t n) = 0;

    /// x = 0 (n), bf16 or fp32.
    virtual void zero(TensorRef x, int64_t n) = 0;

    /// dst = src converted elementwise (n); bf16 destinations round to nearest even.
    virtual void convert(TensorRef dst, ConstTensorRef src, int64_t n) = 0;

    /// Σ over all buffers of Σ x², accumulated in double (global grad-norm: sqrt of this). Returns
    /// a host value (the CUDA backend synchronizes). Non-finite values propagate (inf/NaN result).
    virtual double sum_squares(std::span<const BufferRef> buffers) = 0;

    /// out[0] += alpha * Σ a[r ld + c] b[r ld + c] over r < rows, c < cols: the dot product of two
    /// fp32 (rows, cols) sub-matrices with leading dimension ld (>= cols), on the backend's stream,
    /// one reduction in an order fixed by the shape (deterministic run to run). `out` is one fp32
    /// value anywhere in backend memory (4-byte alignment suffices). The CPU backend computes it
    /// as its matmul of shape (1, 1, rows cols) when ld == cols (row by row otherwise); the CUDA
    /// backend as one block's fixed tree in double, with no library plan. Used by the deferred
    /// expert gradients' Gram-identity norm (docs/design.md "Deferred expert gradients").
    virtual void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld,
                                float alpha) = 0;

    /// The row count the backend's matmul prefers when a caller's row counts vary from call to
    /// call: the CUDA backend keeps one cuBLASLt plan per shape, so such a caller reads a multiple
    /// of this many rows (within valid memory) and uses the rows it needs, keeping the set of
    /// shapes small. 1 (the default): every shape costs the same.
    virtual int64_t matmul_row_granularity() const { return 1; }

    // ---- cross-entropy over the padded vocabulary, tied LM head

    /// Per-token loss from fp32 logits: losses[i] = logsumexp(logits[i, :V]) - logits[i, target[i]];
    /// columns V..Vp-1 (padding) are masked (probability 0). logits (n, Vp) fp32; targets (n) int32
    /// in [0, V); losses (n) fp32. Stable for logits of any finite magnitude. Errors: target out of range.
    virtual void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                                       int64_t vocab_size, int64_t padded_vocab_size) = 0;

    /// dlogits (n, Vp) fp32 = dloss · (softmax(logits[:V]) - onehot(target)) / n, 0 in the padding
    /// columns (overwritten; may alias logits). dloss is the weight of the mean loss in the total
    /// (1/accum_steps).
    virtual void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss,
                                        int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) = 0;

    /// Bytes of workspace lm_head_cross_entropy needs for this shape (0 allowed: pass nullptr).
    virtual int64_t lm_head_workspace_bytes(const ClassifierShape& s) const = 0;

    /// Fused tied LM head + cross-entropy, in chunks of tokens so fp32 logits for the whole batch
    /// are never held at once: logits = x · wte^T (n, Vp); mean_loss (1) fp32 = mean over tokens of
    /// the per-token loss (also written to losses (n) unless null). When dx / dwte are non-null the
    /// backward runs in the same pass with weight dloss on the mean loss: dx (n, C) overwritten,
    /// dwte (Vp, C) accumulated (its padding rows receive 0). x (n, C), wte (Vp, C) bf16 or fp32 (the CUDA
    /// backend: both bf16 or both fp32 as s.bf16_operands says, which sizes its workspace; else an error);
    /// targets (n) int32 in [0, V). workspace: lm_head_workspace_bytes bytes of backend memory,
    /// 16-byte aligned. A bf16 dwte is accumulated in fp32 over the chunks and rounded once.
    virtual void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                                       ConstTensorRef wte, const int32_t* targets, float dloss,
                                       const ClassifierShape& s, void* workspace) = 0;
};

/// The CPU reference backend (kernels/cpu/): OpenBLAS matrix products, OpenMP loops.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace skew
