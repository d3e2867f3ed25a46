// CUDA token + learned position embedding, forward and deterministic backward (docs/design.md: learned
// positions, tied embedding). CPU twin: kernels/cpu/embedding.cpp; semantics: Backend::embedding_*.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace skew::cuda {

/// out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :] (fp32 sum, rounded once). out (B, T, C) bf16;
/// tokens (B, T) int32; wte (vocab_rows, C); wpe (>= T, C). A token outside [0, vocab_rows) sets
/// CUDA_ERR_TOKEN_RANGE in *error_word (nullable) and its row is written as zeros.
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int64_t batch,
                       int64_t seq_len, int64_t channels, int64_t vocab_rows, int* error_word, cudaStream_t stream);

/// Device scratch bytes embedding_backward needs (the stable sort of positions by token).
int64_t embedding_backward_scratch_bytes(int64_t batch, int64_t seq_len, int64_t vocab_rows);

/// dwte[tokens[b,t]] += dout[b,t] (positions of one token summed in increasing position, no
/// atomics); dwpe[t] += Σ_b dout[b,t] in b order. dwte (vocab_rows, C), dwpe (>= T, C) bf16 or fp32,
/// either nullable. scratch: embedding_backward_scratch_bytes bytes of device memory.
void embedding_backward(TensorRef dwte, TensorRef dwpe, const bf16* dout, const int32_t* tokens, int64_t batch,
                        int64_t seq_len, int64_t channels, int64_t vocab_rows, int* error_word, void* scratch,
                        cudaStream_t stream);

}  // namespace skew::cuda
