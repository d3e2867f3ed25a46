// CPU cross-entropy over the padded vocabulary with the tied LM head (design.md: GPT-2 vocabulary
// padded to 50,304, tied embedding and LM head). Padding columns are masked to probability 0; the
// log-sum-exp subtracts the row max, so logits in the hundreds stay finite.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

void check_args(const char* op, const int32_t* targets, int64_t n, int64_t V, int64_t Vp) {
    check_nonneg(op, n);
    if (V <= 0 || Vp < V) fail("{}: vocab_size {} must be positive and at most padded_vocab_size {}", op, V, Vp);
    for (int64_t i = 0; i < n; ++i)
        if (targets[i] < 0 || targets[i] >= V)
            fail("{}: target {} at position {} is outside the vocabulary [0, {})", op, targets[i], i, V);
}

// Stable logsumexp over the first V entries of a row (the real vocabulary), in double.
double vocab_lse(const float* x, int64_t V) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, x[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(x[i]) - double(mx));
    return double(mx) + std::log(sum);
}

}  // namespace

void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                           int64_t vocab_size, int64_t padded_vocab_size) {
    check_args("cross_entropy_forward", targets, n_tokens, vocab_size, padded_vocab_size);
#pragma omp parallel for schedule(static) if (n_tokens * padded_vocab_size > kParallelMinWork)
    for (int64_t i = 0; i < n_tokens; ++i) {
        const float* x = logits + i * padded_vocab_size;
        losses[i] = float(vocab_lse(x, vocab_size) - double(x[targets[i]]));
    }
}

void cross_entropy_backward_scaled(float* dlogits, const float* logits, const int32_t* targets, float grad_scale,
                                   int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size) {
    check_args("cross_entropy_backward", targets, n_tokens, vocab_size, padded_vocab_size);
#pragma omp parallel for schedule(static) if (n_tokens * padded_vocab_size > kParallelMinWork)
    for (int64_t i = 0; i < n_tokens; ++i) {
        const float* x = logits + i * padded_vocab_size;
        float* d = dlogits + i * padded_vocab_size;
        const double lse = vocab_lse(x, vocab_size);
        const int32_t tgt = targets[i];
        for (int64_t v = 0; v < vocab_size; ++v) {
            const double p = std::exp(double(x[v]) - lse);
            d[v] = float(grad_scale * (p - (v == tgt ? 1.0 : 0.0)));
        }
        for (int64_t v = vocab_size; v < padded_vocab_size; ++v) d[v] = 0.0f;
    }
}

int64_t lm_head_chunk_tokens(const ClassifierShape& s) {
    const int64_t budget = int64_t(1) << 22;  // fp32 logits held at once (16 MiB)
    const int64_t chunk = std::max<int64_t>(1, budget / std::max<int64_t>(1, s.padded_vocab_size));
    return std::min(chunk, std::max<int64_t>(1, s.n_tokens));
}

void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                           ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                           void* workspace) {
    const int64_t n = s.n_tokens, C = s.d_model, V = s.vocab_size, Vp = s.padded_vocab_size;
    check_args("lm_head_cross_entropy", targets, n, V, Vp);
    check_nonneg("lm_head_cross_entropy d_model", C);
    if (!workspace && n > 0) fail("lm_head_cross_entropy: null workspace (size from lm_head_workspace_bytes)");
    const int64_t chunk = lm_head_chunk_tokens(s);
    float* logits = static_cast<float*>(workspace);
    std::vector<float> local_losses;
    if (!losses) {
        local_losses.resize(size_t(n));
        losses = local_losses.data();
    }
    const bool backward = dx || dwte;
    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        const int64_t m = std::min(chunk, n - i0);
        const ConstTensorRef xc = offset(x, i0 * C);
        matmul(logits, xc, wte, MatmulShape{m, Vp, C, false, true});
        cross_entropy_forward(losses + i0, logits, targets + i0, m, V, Vp);
        if (!backward) continue;
        cross_entropy_backward_scaled(logits, logits, targets + i0, dloss / float(n), m, V, Vp);
        if (dx) matmul(offset(dx, i0 * C), logits, wte, MatmulShape{m, C, Vp});
        if (dwte) matmul(dwte, logits, xc, MatmulShape{Vp, C, m, true, false, 1.0f, 1.0f});
    }
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += losses[i];
    if (mean_loss) *mean_loss = n > 0 ? float(total / double(n)) : 0.0f;
}

}  // namespace skew::cpu
