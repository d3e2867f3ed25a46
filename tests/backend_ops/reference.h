// Independent double-precision evaluations of the Backend ops (kernels/backend.h), written from the
// interface's definitions, not from the CPU backend's code: what `backend_ops --mode test` holds the
// CPU to. Plain loops over row-major std::vector<double>; shapes as the Backend method of the same name.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace skew::ops::ref {

using Vec = std::vector<double>;

/// C = alpha·op(A)·op(B) + beta·C (MatmulShape); beta = 0 ignores C.
void matmul(Vec& c, const Vec& a, const Vec& b, const MatmulShape& s);

void embedding_forward(Vec& out, const Vec& tokens, const Vec& wte, const Vec& wpe, int64_t B, int64_t T, int64_t C);
void embedding_backward(Vec* dwte, Vec* dwpe, const Vec& dout, const Vec& tokens, int64_t B, int64_t T, int64_t C);

void layernorm_forward(Vec& out, Vec* mean, Vec* rstd, const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C,
                       double eps);
void layernorm_backward(Vec& dx, Vec* dw, Vec* db, const Vec& dout, const Vec& x, const Vec& w, const Vec& mean,
                        const Vec& rstd, int64_t N, int64_t C, bool accumulate);

/// RMSNorm: out = x / sqrt(mean(x^2) + eps) * w per row; rstd optional.
void rmsnorm_forward(Vec& out, Vec* rstd, const Vec& x, const Vec& w, int64_t N, int64_t C, double eps);
/// dx (+= when accumulate) and dw (+=, optional) of Σ out·dout, rstd from the forward.
void rmsnorm_backward(Vec& dx, Vec* dw, const Vec& dout, const Vec& x, const Vec& w, const Vec& rstd, int64_t N,
                      int64_t C, bool accumulate);

/// RoPE in place on x (B, T, H, d): lane i with lane i + d/2 by the angle (pos0 + t)·theta^(-2i/d),
/// rotated back when inverse.
void rope(Vec& x, int64_t B, int64_t T, int64_t H, int64_t d, int64_t pos0, double theta, bool inverse);

/// Causal GQA attention: out and lse (AttentionShape layouts; kv_len > seq_len: the queries are the
/// last seq_len positions).
void attention_forward(Vec& out, Vec& lse, const Vec& q, const Vec& k, const Vec& v, const AttentionShape& s);
/// dq, dk, dv of Σ out·dout, recomputing the probabilities from q and k (not from a saved lse);
/// kv_len = seq_len.
void attention_backward(Vec& dq, Vec& dk, Vec& dv, const Vec& dout, const Vec& q, const Vec& k, const Vec& v,
                        const AttentionShape& s);

void swiglu_forward(Vec& h, const Vec& a, const Vec& b);
void swiglu_backward(Vec& da, Vec& db, const Vec& dh, const Vec& a, const Vec& b);

/// Router forward on the given (already noisy) logits; expert_idx by k passes of a strict-greater argmax
/// over the probabilities rounded to fp32 (the tensor the interface defines top-k on).
struct RouterOut {
    Vec probs, expert_idx, gates, counts, mean_probs;
    double balance = 0.0, z = 0.0;
};
RouterOut moe_router_forward(const Vec& noisy_logits, const Vec& clean_logits, const RouterShape& s,
                             double balance_alpha, double z_coef, bool normalize = true);
/// dlogits from dgates (through renormalization and softmax), the balance loss (f constant) and the z-loss.
void moe_router_backward(Vec& dlogits, const Vec& dgates, const Vec& clean_logits, const Vec& probs,
                         const Vec& expert_idx, const Vec& counts, double d_balance, double d_z, const RouterShape& s,
                         double balance_alpha, double z_coef, bool normalize = true);

/// Stable counting sort of the n·k copies by expert.
void moe_dispatch(Vec& sorted_to_copy, Vec& copy_to_sorted, Vec& offsets, const Vec& expert_idx, int64_t E);
void moe_gather_forward(Vec& xs, const Vec& x, const Vec& sorted_to_copy, int64_t k, int64_t C);
void moe_gather_backward(Vec& dx, const Vec& dxs, const Vec& copy_to_sorted, int64_t n, int64_t k, int64_t C,
                         bool accumulate);
void moe_matmul_forward(Vec& out, const Vec& inp, const Vec& w, const Vec& offsets, int64_t E, int64_t in,
                        int64_t outf);
void moe_matmul_backward(Vec* dinp, Vec* dw, const Vec& dout, const Vec& inp, const Vec& w, const Vec& offsets,
                         int64_t E, int64_t in, int64_t outf, bool accumulate);
void moe_combine_forward(Vec& out, const Vec& ys, const Vec& gates, const Vec& copy_to_sorted, int64_t n, int64_t k,
                         int64_t C);
void moe_combine_backward(Vec* dys, Vec* dgates, const Vec& dout, const Vec& ys, const Vec& gates,
                          const Vec& copy_to_sorted, int64_t n, int64_t k, int64_t C);

void cross_entropy_forward(Vec& losses, const Vec& logits, const Vec& targets, int64_t n, int64_t V, int64_t Vp);
void cross_entropy_backward(Vec& dlogits, const Vec& logits, const Vec& targets, double dloss, int64_t n, int64_t V,
                            int64_t Vp);

/// The tied LM head: logits = x·wte^T, mean loss, per-token losses; dx (overwritten) and dwte (+=)
/// of dloss·mean loss when non-null.
void lm_head_cross_entropy(double& mean_loss, Vec* losses, Vec* dx, Vec* dwte, const Vec& x, const Vec& wte,
                           const Vec& targets, double dloss, const ClassifierShape& s);

}  // namespace skew::ops::ref
