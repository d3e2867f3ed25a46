// CUDA cross-entropy over the padded vocabulary and the fused tied LM head (docs/design.md: GPT-2
// vocabulary padded to 50,304, tied embedding and LM head), in token chunks so fp32 logits for the
// whole batch are never held at once (llm.c's fused classifier). CPU twin: kernels/cpu/cross_entropy.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/matmul.h"

namespace skew::cuda {

/// losses (n) fp32 = logsumexp(logits[i, :V]) - logits[i, target[i]]; logits (n, Vp) fp32; padding
/// columns masked. A target outside [0, V) sets CUDA_ERR_TARGET_RANGE in *error_word (nullable).
void cross_entropy_forward(float* losses, const float* logits, const int32_t* targets, int64_t n_tokens,
                           int64_t vocab_size, int64_t padded_vocab_size, int* error_word, cudaStream_t stream);

/// dlogits (n, Vp) fp32 = grad_scale · (softmax(logits[:V]) - onehot(target)), 0 in the padding
/// (may alias logits). Backend::cross_entropy_backward passes grad_scale = dloss / n.
void cross_entropy_backward_scaled(float* dlogits, const float* logits, const int32_t* targets, float grad_scale,
                                   int64_t n_tokens, int64_t vocab_size, int64_t padded_vocab_size, int* error_word,
                                   cudaStream_t stream);

/// Tokens per chunk of the fused LM head (fp32 logits of a chunk <= 128 MiB; a multiple of 64).
int64_t lm_head_chunk_tokens(const ClassifierShape& s);

/// Device workspace bytes of lm_head_cross_entropy for this shape.
int64_t lm_head_workspace_bytes(const ClassifierShape& s);

/// The fused tied LM head + cross-entropy (Backend::lm_head_cross_entropy): per chunk, logits =
/// x·wte^T by cuBLASLt (fp32 out), one kernel for the loss and dlogits·dloss/n (bf16 when x and wte
/// are bf16, so the two backward products stay on bf16 tensor cores), dx = dlogits·wte and
/// dwte += dlogits^T·x (fp32 over chunks when dwte is bf16, rounded once). mean_loss (1) device fp32.
void lm_head_cross_entropy(Matmul& mm, float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                           ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                           void* workspace, int* error_word, cudaStream_t stream);

}  // namespace skew::cuda
