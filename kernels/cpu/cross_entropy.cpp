// CPU cross-entropy over the padded vocabulary from materialized logits (docs/design.md: GPT-2
// vocabulary padded to 50,304, tied embedding and LM head); the fused head is lm_head.cpp. Padding
// columns are masked to probability 0; the log-sum-exp subtracts the row max, so logits in the
// hundreds stay finite.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

void cross_entropy_check_args(const char* op, const int32_t* targets, int64_t n, int64_t V, int64_t Vp) {
    check_nonneg(op, n);
    if (V <= 0 || Vp < V) fail("{}: vocab_size {} must be positive and at most padded_vocab_size {}", op, V, Vp);
    for (int64_t i = 0; i < n; ++i)
        if (targets[i] < 0 || targets[i] >= V)
            fail("{}: target {} at position {} is outside the vocabulary [0, {})", op, targets[i], i, V);
}

namespace {

// One token's cross-entropy over the real vocabulary x[0, V), stable (row max subtracted), in one
// exp pass. Returns the loss lse - x[target]. When d is non-null also writes the gradient
// d[v] = grad_scale * (softmax(x)[v] - [v == target]) for v < V and 0 for the padding V..Vp-1;
// d may alias x. Vector code (two f32x4 per step) for the max and exp passes.
double xent_row(float* d, const float* x, int32_t target, int64_t V, int64_t Vp, float grad_scale) {
    const int64_t V8 = V - V % 8;
    f32x4 mxa = f32x4{} - INFINITY, mxb = mxa;
    for (int64_t v = 0; v < V8; v += 8) {
        f32x4 xa, xb;
        std::memcpy(&xa, x + v, sizeof(xa));
        std::memcpy(&xb, x + v + 4, sizeof(xb));
        mxa = xa > mxa ? xa : mxa;
        mxb = xb > mxb ? xb : mxb;
    }
    float mx = -INFINITY;
    for (int l = 0; l < 4; ++l) mx = std::max(mx, std::max(mxa[l], mxb[l]));
    for (int64_t v = V8; v < V; ++v) mx = std::max(mx, x[v]);
    const float x_target = x[target];

    // exp pass: eight fp32 lane sums over blocks of 1024, the block sums added in double
    double sum = 0.0;
    for (int64_t b0 = 0; b0 < V8; b0 += 1024) {
        const int64_t b1 = std::min(V8, b0 + 1024);
        f32x4 pa = f32x4{}, pb = f32x4{};
        for (int64_t v = b0; v < b1; v += 8) {
            f32x4 xa, xb;
            std::memcpy(&xa, x + v, sizeof(xa));
            std::memcpy(&xb, x + v + 4, sizeof(xb));
            const f32x4 ea = exp_nonpos_f32x4(xa - mx), eb = exp_nonpos_f32x4(xb - mx);
            if (d) {
                std::memcpy(d + v, &ea, sizeof(ea));
                std::memcpy(d + v + 4, &eb, sizeof(eb));
            }
            pa += ea;
            pb += eb;
        }
        for (int l = 0; l < 4; ++l) sum += double(pa[l]) + double(pb[l]);
    }
    for (int64_t v = V8; v < V; ++v) {
        const float e = exp_nonpos_f32(x[v] - mx);
        if (d) d[v] = e;
        sum += double(e);
    }
    if (d) {
        const float inv = float(double(grad_scale) / sum);
        for (int64_t v = 0; v < V; ++v) d[v] *= inv;
        d[target] -= grad_scale;
        for (int64_t v = V; v < Vp; ++v) d[v] = 0.0f;
    }
    return double(mx) + std::log(sum) - double(x_target);
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                           int64_t vocab_size, int64_t padded_vocab_size) {
    cross_entropy_check_args("cross_entropy_forward", targets, n_tokens, vocab_size, padded_vocab_size);
#pragma omp parallel for schedule(static) if (n_tokens * padded_vocab_size > kParallelMinWork)
    for (int64_t i = 0; i < n_tokens; ++i)
        losses[i] =
            float(xent_row(nullptr, logits + i * padded_vocab_size, targets[i], vocab_size, padded_vocab_size, 0.0f));
}

void cross_entropy_backward_scaled(float* dlogits, const float* logits, const int32_t* targets, float grad_scale,
                                   int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) {
    cross_entropy_check_args("cross_entropy_backward", targets, n_tokens, vocab_size, padded_vocab_size);
#pragma omp parallel for schedule(static) if (n_tokens * padded_vocab_size > kParallelMinWork)
    for (int64_t i = 0; i < n_tokens; ++i)
        xent_row(dlogits + i * padded_vocab_size, logits + i * padded_vocab_size, targets[i], vocab_size,
                 padded_vocab_size, grad_scale);
}

}  // namespace skew::cpu
