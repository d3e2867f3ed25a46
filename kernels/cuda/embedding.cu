// CUDA token + position embedding (docs/design.md, "The paper's model"). The backward groups positions by
// token with the stable counting sort (counting_sort.h) and sums each token's rows in position
// order in one block: deterministic, no floating-point atomics. CPU twin: kernels/cpu/embedding.cpp.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/counting_sort.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(bf16* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const bf16* __restrict__ wte, const bf16* __restrict__ wpe, int64_t n,
                                         int64_t T, int64_t C, int64_t vocab_rows, int* error_word) {
    const int64_t total = n * C;
    for (int64_t e = thread_index(); e < total; e += grid_stride()) {
        const int64_t i = e / C, c = e - i * C;
        const int32_t tok = tokens[i];
        if (tok < 0 || tok >= vocab_rows) {
            if (error_word && c == 0) atomicOr(error_word, CUDA_ERR_TOKEN_RANGE);
            out[e] = bf16{0};
            continue;
        }
        const float w = ld(wte[int64_t(tok) * C + c]);
        st(out + e, wpe ? w + ld(wpe[(i % T) * C + c]) : w);
    }
}

// Block per vocabulary row v: sum the rows of its positions (sorted order = increasing position).
template <class TG>
__global__ void embedding_backward_wte_kernel(TG* __restrict__ dwte, const bf16* __restrict__ dout,
                                              const int64_t* __restrict__ sorted_pos,
                                              const int64_t* __restrict__ offsets, int64_t C) {
    const int64_t v = blockIdx.x;
    const int64_t s0 = offsets[v], s1 = offsets[v + 1];
    if (s0 == s1) return;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = s0; j < s1; ++j) acc += ld(dout[sorted_pos[j] * C + c]);
        st(dwte + v * C + c, ld(dwte[v * C + c]) + acc);
    }
}

template <class TG>
__global__ void embedding_backward_wpe_kernel(TG* __restrict__ dwpe, const bf16* __restrict__ dout, int64_t B,
                                              int64_t T, int64_t C) {
    for (int64_t e = thread_index(); e < T * C; e += grid_stride()) {
        const int64_t t = e / C, c = e - t * C;
        float acc = 0.0f;
        for (int64_t b = 0; b < B; ++b) acc += ld(dout[(b * T + t) * C + c]);
        st(dwpe + e, ld(dwpe[e]) + acc);
    }
}

}  // namespace

// ---- launchers

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                       int64_t seq_len, int64_t channels, int64_t vocab_rows, int* error_word, cudaStream_t stream) {
    check_nonneg("embedding_forward batch", batch);
    check_nonneg("embedding_forward seq_len", seq_len);
    check_nonneg("embedding_forward channels", channels);
    const int64_t n = batch * seq_len;
    if (n == 0 || channels == 0) return;
    embedding_forward_kernel<<<grid_for(n * channels, kThreads), kThreads, 0, stream>>>(
        out, tokens, wte, wpe, n, seq_len, channels, vocab_rows, error_word);
    cuda_check_kernel("embedding_forward_kernel");
}

int64_t embedding_backward_scratch_bytes(int64_t batch, int64_t seq_len, int64_t vocab_rows) {
    return cuda_ws::embedding_backward_scratch_bytes(batch, seq_len, vocab_rows);
}

void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t vocab_rows, int* error_word, void* scratch,
                        cudaStream_t stream) {
    check_nonneg("embedding_backward batch", batch);
    check_nonneg("embedding_backward seq_len", seq_len);
    check_nonneg("embedding_backward channels", channels);
    const int64_t n = batch * seq_len;
    if (n == 0 || channels == 0) return;
    if (dwte && vocab_rows > 0) {
        char* base = static_cast<char*>(scratch);
        auto* sorted_pos = reinterpret_cast<int64_t*>(base);
        auto* offsets = reinterpret_cast<int64_t*>(base + (n * 8 + 15) / 16 * 16);
        void* sort_scratch = base + (n * 8 + 15) / 16 * 16 + ((vocab_rows + 1) * 8 + 15) / 16 * 16;
        counting_sort(sorted_pos, nullptr, offsets, tokens, n, vocab_rows, error_word, CUDA_ERR_TOKEN_RANGE,
                      sort_scratch, stream);
        if (dwte.type == ScalarType::F32)
            embedding_backward_wte_kernel<<<unsigned(vocab_rows), kThreads, 0, stream>>>(
                static_cast<float*>(dwte.data), dout, sorted_pos, offsets, channels);
        else
            embedding_backward_wte_kernel<<<unsigned(vocab_rows), kThreads, 0, stream>>>(
                static_cast<bf16*>(dwte.data), dout, sorted_pos, offsets, channels);
        cuda_check_kernel("embedding_backward_wte_kernel");
    }
    if (dwpe) {
        const unsigned g = grid_for(seq_len * channels, kThreads);
        if (dwpe.type == ScalarType::F32)
            embedding_backward_wpe_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(dwpe.data), dout, batch,
                                                                      seq_len, channels);
        else
            embedding_backward_wpe_kernel<<<g, kThreads, 0, stream>>>(static_cast<bf16*>(dwpe.data), dout, batch,
                                                                      seq_len, channels);
        cuda_check_kernel("embedding_backward_wpe_kernel");
    }
}

}  // namespace skew::cuda
