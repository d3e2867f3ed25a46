// The CPU reference ops as free functions (the CpuBackend methods forward to these). Ops on
// activations are templates over the storage type T = bf16 (what the model runs) or float (what the
// finite-difference tests run); both instantiations share one code path with fp32 accumulation.
// Semantics, shapes and errors of each function: the Backend method of the same name (kernels/backend.h).
#pragma once
#include <cstdint>
#include <span>

#include "kernels/backend.h"
#include "kernels/common/bf16.h"

namespace skew::cpu {

// ---- element access shared by the CPU ops

/// Widen a stored element to fp32.
inline float load(bf16 x) { return bf16_to_f32(x); }
inline float load(float x) { return x; }

/// Store an fp32 value (bf16: round to nearest even).
inline void store(bf16* p, float v) { *p = f32_to_bf16(v); }
inline void store(float* p, float v) { *p = v; }

/// Element i of a typed tensor, widened to fp32.
inline float load_at(ConstTensorRef t, int64_t i) {
    return t.type == ScalarType::BF16 ? bf16_to_f32(static_cast<const bf16*>(t.data)[i])
                                      : static_cast<const float*>(t.data)[i];
}

/// Store v at element i of a typed tensor.
inline void store_at(TensorRef t, int64_t i, float v) {
    if (t.type == ScalarType::BF16) static_cast<bf16*>(t.data)[i] = f32_to_bf16(v);
    else static_cast<float*>(t.data)[i] = v;
}

/// The tensor starting `elems` elements into t.
inline TensorRef offset(TensorRef t, int64_t elems) {
    return TensorRef(static_cast<char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}
inline ConstTensorRef offset(ConstTensorRef t, int64_t elems) {
    return ConstTensorRef(static_cast<const char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}

/// e^x for x <= 0 in fp32 without a libm call, so loops over a vocabulary vectorize: Cody-Waite
/// range reduction and the Cephes expf polynomial, within 2 ulp of expf; 0 below -87 (where
/// e^x < 2^-125, negligible against a softmax denominator >= 1). Source: Cephes expf.c.
inline float exp_nonpos_f32(float x) {
    const float xc = x < -87.0f ? -87.0f : x;  // a select, not std::max: keeps loops vectorizable
    const float magic = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
    const float k = (xc * 1.44269504088896341f + magic) - magic;
    float r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.0f;
    const float scale = f32_from_bits(uint32_t(int32_t(k) + 127) << 23);
    return y * scale * float(x >= -87.0f);
}

/// Four fp32 lanes (GCC/Clang vector extension: one SSE2 / NEON register on every 64-bit target).
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
/// Eight and sixteen lanes: one AVX2 / AVX-512 register, or two / four narrower ones, with the same
/// results lane by lane. Never passed by value (a vector wider than the baseline ABI's registers
/// must not cross a call boundary): by reference, or inside always_inline helpers.
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));

/// exp_nonpos_f32 on every lane of V (a GCC/Clang vector of fp32, I its int32 twin of the same
/// lane count): the same operations, the same results lane by lane. out and x by reference, so a
/// vector wider than the baseline ABI's registers (8 lanes without AVX) never crosses a call
/// boundary by value (clang refuses that outside an AVX function).
template <class V, class I>
inline __attribute__((always_inline)) void exp_nonpos_lanes(V& out, const V& x) {
    const V lo = V{} - 87.0f;
    const V xc = x < lo ? lo : x;
    const float magic = 12582912.0f;
    const V k = (xc * 1.44269504088896341f + magic) - magic;
    V r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    V p = V{} + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const V y = p * r * r + r + 1.0f;
    const V scale = (V)((__builtin_convertvector(k, I) + 127) << 23);
    const V zero = V{};
    out = x < lo ? zero : y * scale;
}

/// exp_nonpos_f32 on four lanes at once.
inline f32x4 exp_nonpos_f32x4(f32x4 x) {
    f32x4 out;
    exp_nonpos_lanes<f32x4, i32x4>(out, x);
    return out;
}

/// A hot CPU loop compiled three times, for AVX-512, AVX2 and baseline x86-64, one of which the
/// loader picks for the processor (GCC/Clang function multi-versioning, an ifunc). Only for code
/// whose results do not depend on the vector width: element-wise operations, and sums in an order
/// the source fixes (explicit lanes, as the LM head's tiles), never `omp simd reduction`. The
/// library compiles with -ffp-contract=off (kernels/cpu/CMakeLists.txt), so no clone fuses a
/// multiply-add the others round twice: every clone gives the same bits for every input but NaN
/// (which stays NaN; its sign may differ). tests/kernels/clone_bits.cpp checks it. Off under GCC's
/// AddressSanitizer, and where the includer defines it (that test, to build one width at a time).
#ifndef SKEW_CPU_CLONES
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__SANITIZE_ADDRESS__)
#define SKEW_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SKEW_CPU_CLONES
#endif
#endif

/// Work (elements touched) below which a loop runs on one thread: an OpenMP fork costs more.
constexpr int64_t kParallelMinWork = int64_t(1) << 15;

/// Throw skew::Error when a size argument is negative (what names the op and argument).
void check_nonneg(const char* what, int64_t v);

// ---- matmul (matmul.cpp)

/// While alive, OpenBLAS runs every call on the calling thread (its own thread pool stays idle),
/// so OpenMP threads can each run a product on their own slice without OpenBLAS's threads spinning
/// beside them; the previous OpenBLAS thread count is restored at the end. Held by the host thread
/// outside OpenMP parallel regions (one at a time: the backend is driven by one host thread);
/// inside a parallel region it changes nothing.
struct BlasSerialScope {
    BlasSerialScope();
    ~BlasSerialScope();
    BlasSerialScope(const BlasSerialScope&) = delete;
    BlasSerialScope& operator=(const BlasSerialScope&) = delete;
    int saved_threads;
};

void matmul(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s);

// ---- embedding (embedding.cpp)

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t batch, int64_t seq_len,
                       int64_t channels, int64_t vocab_rows);
template <class T>
void embedding_backward(TensorRef dwte, TensorRef dwpe, const T* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t vocab_rows);

// ---- layernorm (layernorm.cpp)

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* weight, const float* bias,
                       int64_t n_rows, int64_t channels, float eps);
template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp, const float* weight,
                        const float* mean, const float* rstd, int64_t n_rows, int64_t channels, bool accumulate_dinp);

// ---- rmsnorm (rmsnorm.cpp)

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const float* weight, int64_t n_rows, int64_t channels,
                     float eps);
template <class T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const float* weight, const float* rstd,
                      int64_t n_rows, int64_t channels, bool accumulate_dinp);

// ---- bias add of a linear layer's output (bias.cpp)

template <class T>
void bias_add_forward(T* out, const float* bias, int64_t n_rows, int64_t channels);
template <class T>
void bias_add_backward(float* dbias, const T* dout, int64_t n_rows, int64_t channels);

// ---- rotary position embedding (rope.cpp)

template <class T>
void rope(T* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
          bool inverse);

// ---- attention (attention.cpp)

template <class T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const AttentionShape& s);
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const float* lse, const AttentionShape& s);

// ---- swiglu (swiglu.cpp)

template <class T>
void swiglu_forward(T* h, const T* a, const T* b, int64_t n);
template <class T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, int64_t n);

// ---- sigmoid gate (sigmoid_gate.cpp)

template <class T>
void sigmoid_gate_forward(T* out, const float* logit, const T* s, int64_t n_rows, int64_t channels, bool accumulate);
template <class T>
void sigmoid_gate_backward(T* ds, float* dlogit, const T* dout, const float* logit, const T* s, int64_t n_rows,
                           int64_t channels);

// ---- router (moe_router.cpp)

void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                        float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                        const RouterOptions& o);
void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                         const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                         float d_z, const RouterShape& s, const RouterOptions& o);

// ---- dispatch (moe_dispatch.cpp)

void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                  int64_t n_tokens, int64_t top_k, int64_t n_experts);
template <class T>
void moe_gather_forward(T* xs, const T* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                        int64_t channels);
template <class T>
void moe_gather_backward(T* dx, const T* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                         int64_t channels, bool accumulate);
void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                        int64_t n_experts, int64_t in_features, int64_t out_features);
void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                         ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                         int64_t out_features, bool accumulate_dinp);
template <class T>
void moe_combine_forward(T* out, const T* ys, const float* gates, const int64_t* copy_to_sorted, int64_t n_tokens,
                         int64_t top_k, int64_t channels);
template <class T>
void moe_combine_backward(T* dys, float* dgates, const T* dout, const T* ys, const float* gates,
                          const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k, int64_t channels);

// ---- elementwise and reductions (elementwise.cpp)

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n);
void accumulate(TensorRef dst, ConstTensorRef src, int64_t n);
void scale(TensorRef x, float factor, int64_t n);
void zero(TensorRef x, int64_t n);
void convert(TensorRef dst, ConstTensorRef src, int64_t n);
double sum_squares(std::span<const BufferRef> buffers);

// ---- cross-entropy (cross_entropy.cpp) and the fused LM head (lm_head.cpp)

/// Throw skew::Error naming `op` when n < 0, V <= 0, Vp < V or a target is outside [0, V).
void cross_entropy_check_args(const char* op, const int32_t* targets, int64_t n, int64_t V, int64_t Vp);

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                           int64_t vocab_size, int64_t padded_vocab_size);
/// dlogits = grad_scale · (softmax - onehot); the Backend method passes grad_scale = dloss / n.
void cross_entropy_backward_scaled(float* dlogits, const float* logits, const int32_t* targets, float grad_scale,
                                   int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size);
/// Tokens per chunk of the fused LM head for this shape (bounds the fp32 logits held at once).
int64_t lm_head_chunk_tokens(const ClassifierShape& s);
int64_t lm_head_workspace_bytes(const ClassifierShape& s);
void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                           ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                           void* workspace);

/// The fused head's softmax statistics of one logits tile t (rows x cols fp32, row stride ld; cols
/// the columns inside the real vocabulary): per row r the running max gmax[r] and fp64 sum of
/// exp(t - gmax) gsum[r] take in the tile, the sum rescaled by exp(old max - new max) when the max
/// grows. The same bits on every CPU (kernels/cpu/lm_head.cpp). Called by lm_head_cross_entropy
/// and bench/bench_ops.cpp.
void lm_head_tile_softmax_stats(const float* t, int64_t ld, int64_t rows, int64_t cols, float* gmax, double* gsum);

/// The tile t (rows x cols fp32, stride ld; its first column is vocabulary column c0) overwritten by
/// its logits' gradient: exp(t - row_max[r]) · row_inv[r] for columns < V, 0 for the padding, and
/// grad_scale subtracted at the row's target column. The same bits on every CPU.
void lm_head_tile_dlogits(float* t, int64_t ld, int64_t rows, int64_t c0, int64_t cols, int64_t V, const float* row_max,
                          const float* row_inv, const int32_t* targets, float grad_scale);

}  // namespace skew::cpu
