// The normalization and positions of a block by the config's choices (model/layers.h).
#include "model/layers.h"

#include <utility>

namespace skew {

void norm_forward(Backend& be, const ModelConfig& c, bf16* out, float* mean, float* rstd, const bf16* x,
                  const ParamRef& w, const ParamRef& b, int64_t n_rows) {
    const float eps = float(c.norm_eps);
    const float* weight = static_cast<const float*>(w.weight);
    if (c.norm == NormKind::RMSNORM) return be.rmsnorm_forward(out, rstd, x, weight, n_rows, c.d_model, eps);
    be.layernorm_forward(out, mean, rstd, x, weight, static_cast<const float*>(b.weight), n_rows, c.d_model, eps);
}

void norm_backward(Backend& be, const ModelConfig& c, bf16* dx, const ParamRef& w, const ParamRef& b, const bf16* dout,
                   const bf16* x, const float* mean, const float* rstd, int64_t n_rows) {
    const float* weight = static_cast<const float*>(w.weight);
    float* dweight = static_cast<float*>(w.grad.data);
    if (c.norm == NormKind::RMSNORM) return be.rmsnorm_backward(dx, dweight, dout, x, weight, rstd, n_rows, c.d_model);
    be.layernorm_backward(dx, dweight, static_cast<float*>(b.grad.data), dout, x, weight, mean, rstd, n_rows,
                          c.d_model);
}

namespace {

// RMSNorm's (rows, channels) for model.qk_norm over n_tokens rows of heads * head_dim lanes.
std::pair<int64_t, int64_t> qk_norm_shape(const ModelConfig& c, int64_t n_tokens, int64_t heads) {
    if (c.qk_norm == QkNorm::PER_HEAD) return {n_tokens * heads, c.head_dim()};
    return {n_tokens, heads * c.head_dim()};
}

}  // namespace

void qk_norm_forward(Backend& be, const ModelConfig& c, bf16* out, float* rstd, const bf16* x, const ParamRef& w,
                     int64_t n_tokens, int64_t heads) {
    const auto [rows, channels] = qk_norm_shape(c, n_tokens, heads);
    be.rmsnorm_forward(out, rstd, x, static_cast<const float*>(w.weight), rows, channels, float(c.norm_eps));
}

void qk_norm_backward(Backend& be, const ModelConfig& c, bf16* dx, const ParamRef& w, const bf16* dout, const bf16* x,
                      const float* rstd, int64_t n_tokens, int64_t heads) {
    const auto [rows, channels] = qk_norm_shape(c, n_tokens, heads);
    be.rmsnorm_backward(dx, static_cast<float*>(w.grad.data), dout, x, static_cast<const float*>(w.weight), rstd, rows,
                        channels);
}

void bias_forward(Backend& be, bf16* out, const ParamRef& b, int64_t n_rows) {
    if (b.info) be.bias_add_forward(out, static_cast<const float*>(b.weight), n_rows, b.numel());
}

void bias_backward(Backend& be, const ParamRef& b, const bf16* dout, int64_t n_rows) {
    if (b.info) be.bias_add_backward(static_cast<float*>(b.grad.data), dout, n_rows, b.numel());
}

void rotate_qk(Backend& be, const ModelConfig& c, bf16* q, bf16* k, int64_t batch, int64_t seq_len, int64_t pos0,
               bool inverse) {
    if (c.positions != Positions::ROPE) return;
    const float theta = float(c.rope_theta);
    be.rope(q, batch, seq_len, c.n_heads, c.head_dim(), pos0, theta, inverse);
    be.rope(k, batch, seq_len, c.n_kv_heads, c.head_dim(), pos0, theta, inverse);
}

}  // namespace skew
