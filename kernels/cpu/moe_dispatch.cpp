// CPU dropless MoE dispatch (docs/design.md, "The data path": router -> top-2 -> dispatch -> expert
// SwiGLU -> combine): a stable counting sort of the n·k token copies by expert, row gather, grouped
// expert matmuls over variable token counts (a loop over experts), weighted combine, and backwards.
#include <omp.h>

#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

void moe_dispatch(int64_t* sorted_to_copy, int64_t* copy_to_sorted, int64_t* offsets, const int32_t* expert_idx,
                  int64_t n_tokens, int64_t top_k, int64_t n_experts) {
    check_nonneg("moe_dispatch n_tokens", n_tokens);
    if (top_k < 1 || n_experts < 1) fail("moe_dispatch: top_k {} and n_experts {} must be positive", top_k, n_experts);
    const int64_t nk = n_tokens * top_k;
    for (int64_t e = 0; e <= n_experts; ++e) offsets[e] = 0;
    for (int64_t j = 0; j < nk; ++j) {
        const int32_t e = expert_idx[j];
        if (e < 0 || e >= n_experts)
            fail("moe_dispatch: expert index {} of token copy {} is outside [0, {})", e, j, n_experts);
        ++offsets[e + 1];
    }
    for (int64_t e = 0; e < n_experts; ++e) offsets[e + 1] += offsets[e];
    std::vector<int64_t> fill(offsets, offsets + n_experts);
    for (int64_t j = 0; j < nk; ++j) {
        const int64_t p = fill[size_t(expert_idx[j])]++;
        sorted_to_copy[p] = j;
        copy_to_sorted[j] = p;
    }
}

template <class T>
void moe_gather_forward(T* xs, const T* x, const int64_t* sorted_to_copy, int64_t n_tokens, int64_t top_k,
                        int64_t channels) {
    check_nonneg("moe_gather_forward n_tokens", n_tokens);
    check_nonneg("moe_gather_forward channels", channels);
    const int64_t nk = n_tokens * top_k;
#pragma omp parallel for schedule(static) if (n_tokens * top_k * channels > kParallelMinWork)
    for (int64_t p = 0; p < nk; ++p) {
        const T* src = x + (sorted_to_copy[p] / top_k) * channels;
        T* dst = xs + p * channels;
        for (int64_t c = 0; c < channels; ++c) dst[c] = src[c];
    }
}

template <class T>
void moe_gather_backward(T* dx, const T* dxs, const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k,
                         int64_t channels, bool accumulate) {
    check_nonneg("moe_gather_backward n_tokens", n_tokens);
    check_nonneg("moe_gather_backward channels", channels);
#pragma omp parallel for schedule(static) if (n_tokens * top_k * channels > kParallelMinWork)
    for (int64_t t = 0; t < n_tokens; ++t) {
        T* d = dx + t * channels;
        for (int64_t c = 0; c < channels; ++c) {
            float acc = accumulate ? load(d[c]) : 0.0f;
            for (int64_t j = 0; j < top_k; ++j) acc += load(dxs[copy_to_sorted[t * top_k + j] * channels + c]);
            store(d + c, acc);
        }
    }
}

void moe_matmul_forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                        int64_t n_experts, int64_t in_features, int64_t out_features) {
    check_nonneg("moe_matmul_forward n_experts", n_experts);
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = offsets[e], rows = offsets[e + 1] - r0;
        if (rows < 0) fail("moe_matmul_forward: offsets decrease at expert {}", e);
        if (rows == 0) continue;
        matmul(offset(out, r0 * out_features), offset(inp, r0 * in_features),
               offset(weight, e * out_features * in_features),
               MatmulShape{rows, out_features, in_features, false, true});
    }
}

void moe_matmul_backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                         ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                         int64_t out_features, bool accumulate_dinp) {
    check_nonneg("moe_matmul_backward n_experts", n_experts);
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = offsets[e], rows = offsets[e + 1] - r0;
        if (rows < 0) fail("moe_matmul_backward: offsets decrease at expert {}", e);
        if (rows == 0) continue;  // an expert without tokens gets no gradient
        if (dinp)
            matmul(offset(dinp, r0 * in_features), offset(dout, r0 * out_features),
                   offset(weight, e * out_features * in_features),
                   MatmulShape{rows, in_features, out_features, false, false, 1.0f, accumulate_dinp ? 1.0f : 0.0f});
        if (dweight)
            matmul(offset(dweight, e * out_features * in_features), offset(dout, r0 * out_features),
                   offset(inp, r0 * in_features),
                   MatmulShape{out_features, in_features, rows, true, false, 1.0f, 1.0f});
    }
}

template <class T>
void moe_combine_forward(T* out, const T* ys, const float* gates, const int64_t* copy_to_sorted, int64_t n_tokens,
                         int64_t top_k, int64_t channels) {
    check_nonneg("moe_combine_forward n_tokens", n_tokens);
    check_nonneg("moe_combine_forward channels", channels);
#pragma omp parallel for schedule(static) if (n_tokens * top_k * channels > kParallelMinWork)
    for (int64_t t = 0; t < n_tokens; ++t) {
        T* o = out + t * channels;
        for (int64_t c = 0; c < channels; ++c) {
            float acc = 0.0f;
            for (int64_t j = 0; j < top_k; ++j)
                acc += gates[t * top_k + j] * load(ys[copy_to_sorted[t * top_k + j] * channels + c]);
            store(o + c, acc);
        }
    }
}

template <class T>
void moe_combine_backward(T* dys, float* dgates, const T* dout, const T* ys, const float* gates,
                          const int64_t* copy_to_sorted, int64_t n_tokens, int64_t top_k, int64_t channels) {
    check_nonneg("moe_combine_backward n_tokens", n_tokens);
    check_nonneg("moe_combine_backward channels", channels);
#pragma omp parallel for schedule(static) if (n_tokens * top_k * channels > kParallelMinWork)
    for (int64_t t = 0; t < n_tokens; ++t) {
        const T* g = dout + t * channels;
        for (int64_t j = 0; j < top_k; ++j) {
            const int64_t p = copy_to_sorted[t * top_k + j];
            const float w = gates[t * top_k + j];
            float dot = 0.0f;
            for (int64_t c = 0; c < channels; ++c) {
                const float gv = load(g[c]);
                if (dgates) dot += gv * load(ys[p * channels + c]);
                if (dys) store(dys + p * channels + c, w * gv);
            }
            if (dgates) dgates[t * top_k + j] = dot;
        }
    }
}

template void moe_gather_forward<bf16>(bf16*, const bf16*, const int64_t*, int64_t, int64_t, int64_t);
template void moe_gather_forward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t);
template void moe_gather_backward<bf16>(bf16*, const bf16*, const int64_t*, int64_t, int64_t, int64_t, bool);
template void moe_gather_backward<float>(float*, const float*, const int64_t*, int64_t, int64_t, int64_t, bool);
template void moe_combine_forward<bf16>(bf16*, const bf16*, const float*, const int64_t*, int64_t, int64_t, int64_t);
template void moe_combine_forward<float>(float*, const float*, const float*, const int64_t*, int64_t, int64_t, int64_t);
template void moe_combine_backward<bf16>(bf16*, float*, const bf16*, const bf16*, const float*, const int64_t*, int64_t,
                                         int64_t, int64_t);
template void moe_combine_backward<float>(float*, float*, const float*, const float*, const float*, const int64_t*,
                                          int64_t, int64_t, int64_t);

}  // namespace skew::cpu
