// The parts of a block that follow the config's architecture choices (docs/architectures.md): the
// normalization (model.norm: LayerNorm with bias, or RMSNorm), the positions (model.positions:
// learned rows added by the embedding, or RoPE on q and k), the q and k normalization
// (model.qk_norm) and the projections' biases (model.attention_bias). The one block forward
// (model/block.cpp), which training and the KV-cache decoder both run, and the training backward
// (model/model.cpp) call these.
#pragma once
#include <cstdint>

#include "engine/config.h"
#include "kernels/backend.h"
#include "model/model.h"

namespace skew {

/// out = norm(x) of n_rows rows of d_model (bf16): LayerNorm with weight w and bias b (mean and
/// rstd saved where non-null), or RMSNorm with weight w (rstd saved; mean and b unused).
void norm_forward(Backend& be, const ModelConfig& c, bf16* out, float* mean, float* rstd, const bf16* x,
                  const ParamRef& w, const ParamRef& b, int64_t n_rows);

/// The normalization's backward: dx (n_rows, d_model) bf16 overwritten from dout, the weight's (and
/// LayerNorm's bias's) fp32 gradient accumulated, from the forward's input x and saved mean, rstd.
void norm_backward(Backend& be, const ModelConfig& c, bf16* dx, const ParamRef& w, const ParamRef& b, const bf16* dout,
                   const bf16* x, const float* mean, const float* rstd, int64_t n_rows);

/// model.qk_norm (full or per_head): out = RMSNorm of x, n_tokens rows of heads * head_dim lanes
/// (bf16), with the model's epsilon and weight w (fp32): full normalizes each token's heads *
/// head_dim lanes together (weight of that width; OLMoE), per_head each head's head_dim lanes
/// (weight of head_dim shared by the heads; Qwen3). rstd: (n_tokens) for full, (n_tokens * heads)
/// for per_head (nullable). out must not alias x.
void qk_norm_forward(Backend& be, const ModelConfig& c, bf16* out, float* rstd, const bf16* x, const ParamRef& w,
                     int64_t n_tokens, int64_t heads);

/// qk_norm_forward's backward: dx (n_tokens, heads * head_dim) bf16 overwritten from dout; w's fp32
/// gradient accumulated; x and rstd as the forward's.
void qk_norm_backward(Backend& be, const ModelConfig& c, bf16* dx, const ParamRef& w, const bf16* dout, const bf16* x,
                      const float* rstd, int64_t n_tokens, int64_t heads);

/// out (n_rows, bias width) bf16 += the bias b (fp32) per row; nothing when b is absent (no info:
/// model.attention_bias false).
void bias_forward(Backend& be, bf16* out, const ParamRef& b, int64_t n_rows);

/// The bias's gradient: b.grad (fp32) += the column sums of dout (n_rows, bias width); nothing when
/// b is absent.
void bias_backward(Backend& be, const ParamRef& b, const bf16* dout, int64_t n_rows);

/// With model.positions rope: q (batch, seq_len, n_heads, head_dim) and k (..., n_kv_heads, ...)
/// rotated in place to positions pos0 + t (inverse: rotated back, the backward of dq and dk); with
/// learned positions nothing (the embedding added them).
void rotate_qk(Backend& be, const ModelConfig& c, bf16* q, bf16* k, int64_t batch, int64_t seq_len, int64_t pos0,
               bool inverse = false);

}  // namespace skew
