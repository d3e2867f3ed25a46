// CPU token + learned position embedding, forward and deterministic backward (docs/design.md, "The
// paper's model": learned positions, tied embedding). The backward buckets positions by token (a
// stable counting sort) so every gradient row is summed in a fixed order without atomics.
#include <omp.h>

#include <vector>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

void check_tokens(const int32_t* tokens, int64_t n, int64_t vocab_rows) {
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab_rows)
            fail("embedding: token {} at position {} is outside the vocabulary [0, {})", tokens[i], i, vocab_rows);
}

// g[row, :] += vals[:] (one rounding per element when g is bf16).
void add_row(TensorRef g, int64_t row, const float* vals, int64_t channels) {
    for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = row * channels + c;
        store_at(g, i, load_at(g, i) + vals[c]);
    }
}

}  // namespace

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t batch, int64_t seq_len,
                       int64_t channels, int64_t vocab_rows) {
    check_nonneg("embedding_forward batch", batch);
    check_nonneg("embedding_forward seq_len", seq_len);
    check_nonneg("embedding_forward channels", channels);
    const int64_t n = batch * seq_len;
    check_tokens(tokens, n, vocab_rows);
#pragma omp parallel for schedule(static) if (n * channels > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = i % seq_len;
        const T* we = wte + int64_t(tokens[i]) * channels;
        T* o = out + i * channels;
        if (!wpe) {
            for (int64_t c = 0; c < channels; ++c) store(o + c, load(we[c]));
            continue;
        }
        const T* pe = wpe + t * channels;
        for (int64_t c = 0; c < channels; ++c) store(o + c, load(we[c]) + load(pe[c]));
    }
}

template <class T>
void embedding_backward(TensorRef dwte, TensorRef dwpe, const T* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t vocab_rows) {
    check_nonneg("embedding_backward batch", batch);
    check_nonneg("embedding_backward seq_len", seq_len);
    check_nonneg("embedding_backward channels", channels);
    const int64_t n = batch * seq_len;
    check_tokens(tokens, n, vocab_rows);

    if (dwte) {
        // Stable counting sort of positions by token; then one task per distinct token.
        std::vector<int64_t> start(size_t(vocab_rows) + 1, 0);
        for (int64_t i = 0; i < n; ++i) ++start[size_t(tokens[i]) + 1];
        for (int64_t v = 0; v < vocab_rows; ++v) start[size_t(v) + 1] += start[size_t(v)];
        std::vector<int64_t> order(static_cast<size_t>(n)), fill(start.begin(), start.end() - 1);
        for (int64_t i = 0; i < n; ++i) order[size_t(fill[size_t(tokens[i])]++)] = i;
        std::vector<int32_t> distinct;
        for (int64_t v = 0; v < vocab_rows; ++v)
            if (start[size_t(v) + 1] > start[size_t(v)]) distinct.push_back(int32_t(v));
        const int64_t nd = int64_t(distinct.size());
#pragma omp parallel if (n * channels > kParallelMinWork)
        {
            std::vector<float> acc(static_cast<size_t>(channels));
#pragma omp for schedule(dynamic, 16)
            for (int64_t d = 0; d < nd; ++d) {
                const int32_t v = distinct[size_t(d)];
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t j = start[size_t(v)]; j < start[size_t(v) + 1]; ++j) {
                    const T* g = dout + order[size_t(j)] * channels;
                    for (int64_t c = 0; c < channels; ++c) acc[size_t(c)] += load(g[c]);
                }
                add_row(dwte, v, acc.data(), channels);
            }
        }
    }
    if (dwpe) {
#pragma omp parallel if (n * channels > kParallelMinWork)
        {
            std::vector<float> acc(static_cast<size_t>(channels));
#pragma omp for schedule(static)
            for (int64_t t = 0; t < seq_len; ++t) {
                std::fill(acc.begin(), acc.end(), 0.0f);
                for (int64_t b = 0; b < batch; ++b) {
                    const T* g = dout + (b * seq_len + t) * channels;
                    for (int64_t c = 0; c < channels; ++c) acc[size_t(c)] += load(g[c]);
                }
                add_row(dwpe, t, acc.data(), channels);
            }
        }
    }
}

template void embedding_forward<bf16>(bf16*, const int32_t*, const bf16*, const bf16*, int64_t, int64_t, int64_t,
                                      int64_t);
template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int64_t, int64_t, int64_t,
                                       int64_t);
template void embedding_backward<bf16>(TensorRef, TensorRef, const bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                       int64_t);
template void embedding_backward<float>(TensorRef, TensorRef, const float*, const int32_t*, int64_t, int64_t, int64_t,
                                        int64_t);

}  // namespace skew::cpu
