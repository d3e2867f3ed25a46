// Helpers shared by the CPU optimizer loops (optim/*.cpp): reading gradients and weights of either
// dtype, the one write-back (decay fused in fp32 or the trainer's bf16 premultiply, then the
// configured rounding; docs/optimizers.md §9), per-algorithm entry points.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/error.h"
#include "kernels/common/bf16.h"
#include "kernels/common/optim_math.h"
#include "kernels/common/rounding.h"
#include "optim/optimizer.h"

namespace skew::optim_detail {

/// Loops over fewer elements than this run on one thread (a parallel region costs more).
constexpr int64_t OPTIM_PARALLEL_MIN = 1 << 15;

/// Gradient element i (relative to the slot's view) as fp32, times the slot's grad_scale (the folded
/// clip coefficient; 1 reads it exactly), rounded once as the CUDA kernels do.
inline float grad_at(const ParamSlot& s, int64_t i) {
    const float g = s.grad_dtype == DType::F32 ? static_cast<const float*>(s.grad)[i]
                                               : bf16_to_f32(static_cast<const bf16*>(s.grad)[i]);
    return rn_mul(g, s.grad_scale);
}

/// Weight element i (relative to the view) as fp32.
inline float weight_at(const ParamSlot& s, int64_t i) {
    return s.info->dtype == DType::F32 ? static_cast<const float*>(s.weight)[i]
                                       : bf16_to_f32(static_cast<const bf16*>(s.weight)[i]);
}

/// SkewAdam's numerator coefficient at step t (Algorithm 1 lines 8, 10): sqrt(1-beta2^t)/(1-beta1^t)
/// with momentum, sqrt(1-beta2^t) without; with no second moment (D = 1) the sqrt factor is dropped.
/// One source for the CPU loop and the CUDA step.
inline float skewadam_numerator_coef(const OptimizerConfig& opt, const ParamPolicy& pol, int64_t t) {
    const double bc1 = 1.0 - std::pow(opt.beta1, double(t)), bc2 = 1.0 - std::pow(opt.beta2, double(t));
    const bool momentum = pol.momentum == MomentumKind::FP32;
    const bool has_second = pol.second_moment != SecondMomentKind::NONE;
    return float((has_second ? std::sqrt(bc2) : 1.0) / (momentum ? bc1 : 1.0));
}

/// Everything the write-back of one tensor needs.
struct WriteBack {
    RoundingMode mode = ROUNDING_STOCHASTIC;
    bool premultiply = false;  // weight_decay_mode: bf16_premultiply (the paper's trainer)
    float keep = 1.0f;         // 1 - lr*wd
    float lr = 0.0f;           // multiplies the update
    uint64_t seed = 0;
    uint32_t step = 0;
    uint32_t tensor = 0;
    int64_t element_base = 0;  // the view's first element in the tensor
};

/// The write-back of a parameter with decay factor keep = 1 - lr_decay*wd and update multiplier lr.
inline WriteBack make_write_back(const OptimizerConfig& opt, const ParamSlot& s, const OptimStep& step,
                                 double lr_update, double lr_decay, double wd) {
    WriteBack wb;
    wb.mode = opt.rounding == Rounding::STOCHASTIC ? ROUNDING_STOCHASTIC
              : opt.rounding == Rounding::DITHERED ? ROUNDING_DITHERED
                                                   : ROUNDING_NEAREST;
    wb.premultiply = opt.weight_decay_mode == WeightDecayMode::BF16_PREMULTIPLY;
    wb.keep = float(1.0 - lr_decay * wd);
    wb.lr = float(lr_update);
    wb.seed = step.seed;
    wb.step = uint32_t(step.t);
    wb.tensor = s.info->index;
    wb.element_base = s.view_begin + s.element_base + s.info->element_offset();  // global index (expert shards)
    return wb;
}

/// Store W <- round(W*keep - lr*u) for element i of the view. fp32 parameters are written exactly
/// (no rounding); bf16 ones through the configured rounding, noise keyed by the 64-bit element
/// index element_base + i. With premultiply the bf16 weight is first decayed and rounded to
/// nearest on its own (the trainer's `p.mul_(1 - lr*wd)`), then updated (optim_bf16_target).
inline void store_update(const ParamSlot& s, const WriteBack& wb, int64_t i, float u) {
    if (s.info->dtype == DType::F32) {
        float* w = static_cast<float*>(s.weight);
        w[i] = optim_decayed_target(w[i], wb.keep, wb.lr, u);
        return;
    }
    bf16* w = static_cast<bf16*>(s.weight);
    const float x = optim_bf16_target(bf16_to_f32(w[i]), wb.keep, wb.lr, u, wb.premultiply);
    w[i] = bf16_write_back(x, wb.mode, wb.seed, wb.step, wb.tensor, uint64_t(wb.element_base + i));
}

/// store_update with the rounding word r already drawn (for loops that draw one Philox block per
/// four elements); r is ignored for nearest rounding and fp32 weights.
inline void store_update_bits(const ParamSlot& s, const WriteBack& wb, int64_t i, float u, uint32_t r) {
    if (s.info->dtype == DType::F32 || wb.mode == ROUNDING_NEAREST) {
        store_update(s, wb, i, u);
        return;
    }
    bf16* w = static_cast<bf16*>(s.weight);
    w[i] = optim_bf16_write(bf16_to_f32(w[i]), wb.keep, wb.lr, u, wb.premultiply, wb.mode, r);
}

/// For i in [begin, end) (view-relative): u = body(i), then W[i] <- round(W*keep - lr*u). OpenMP over
/// groups of four tensor elements so that one Philox block serves four elements; the noise of
/// element e is word e % 4 of block e / 4, exactly rounding_bits(seed, step, tensor, e).
template <class F>
void for_each_write(const ParamSlot& s, const WriteBack& wb, int64_t begin, int64_t end, F&& body) {
    if (end <= begin) return;
    const int64_t base = wb.element_base;
    const int64_t g0 = (base + begin) >> 2, g1 = (base + end + 3) >> 2;
    const bool draw = s.info->dtype == DType::BF16 && wb.mode != ROUNDING_NEAREST;
    const PhiloxKey key{wb.seed, PHILOX_STREAM_ROUNDING};
#pragma omp parallel for schedule(static) if (end - begin >= OPTIM_PARALLEL_MIN)
    for (int64_t g = g0; g < g1; ++g) {
        Philox4 blk{{0, 0, 0, 0}};
        if (draw) blk = philox_block(key, wb.step, wb.tensor, uint64_t(g));
        const int64_t lo = std::max(begin, g * 4 - base), hi = std::min(end, g * 4 + 4 - base);
        for (int64_t i = lo; i < hi; ++i) {
            float u = body(i);
            store_update_bits(s, wb, i, u, blk.v[(base + i) & 3]);
        }
    }
}

/// Sum over i in [0, n) of f(i)^2 in double, over fixed chunks of 4096 elements summed in order:
/// the same value for any thread count (a resumed run on another machine clips identically).
template <class F>
double sum_of_squares(int64_t n, F&& f) {
    constexpr int64_t CHUNK = 4096;
    const int64_t nch = (n + CHUNK - 1) / CHUNK;
    std::vector<double> part(static_cast<size_t>(nch), 0.0);
#pragma omp parallel for schedule(static) if (n >= OPTIM_PARALLEL_MIN)
    for (int64_t c = 0; c < nch; ++c) {
        double acc = 0;
        const int64_t hi = std::min(n, (c + 1) * CHUNK);
        for (int64_t i = c * CHUNK; i < hi; ++i) {
            double u = double(f(i));
            acc += u * u;
        }
        part[size_t(c)] = acc;
    }
    double total = 0;
    for (double v : part) total += v;
    return total;
}

/// Number of elements the slot covers (its view or the whole tensor).
inline int64_t slot_count(const ParamSlot& s) {
    return s.view_count < 0 ? s.info->numel() - s.view_begin : s.view_count;
}

/// Throw unless the slot covers the whole tensor (matrix-wide reductions need all of it).
inline void require_whole(const ParamSlot& s, const char* what) {
    if (s.view_begin != 0 || (s.view_count >= 0 && s.view_count != s.info->numel()))
        fail("optimizer {}: tensor '{}' is given as a view; {} needs the whole tensor", what, s.info->name, what);
}

/// The state pointer of kind k, or an error naming the tensor.
inline float* need_state(const ParamSlot& s, StateKind k) {
    float* p = s.st(k);
    if (!p) fail("optimizer: tensor '{}' has no {} state bound", s.info->name, choice_name(k));
    return p;
}

/// Matrices of a parameter for the factored/matrix optimizers: count, rows, cols (a vector is one
/// 1 x n matrix for callers that want it so; they check is_vector first).
struct MatrixShape {
    int64_t count, rows, cols;
};
inline MatrixShape matrix_shape(const ParamInfo& p) {
    if (p.shape.size() == 2) return {1, p.shape[0], p.shape[1]};
    if (p.shape.size() == 3) return {p.shape[0], p.shape[1], p.shape[2]};
    if (p.shape.size() == 1) return {1, 1, p.shape[0]};
    fail("optimizer: tensor '{}' has {} dimensions; only 1, 2 and 3 (expert stacks) are supported", p.name,
         p.shape.size());
}

/// Per-matrix row and column means of (g^2 + add) in double: rowmean (rows), colmean (cols) for
/// matrix e of the slot.
void factored_means(const ParamSlot& s, int64_t e, int64_t rows, int64_t cols, float add, double* rowmean,
                    double* colmean);

void skewadam_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);
void adamw_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);
void lion_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);
void adafactor_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);
/// Muon's orthogonalization of one rows x cols matrix U0 (row-major fp32) into O: transposed when
/// tall, X = U0/(|U0|_F + 1e-7), `steps` Newton-Schulz iterations (3.4445, -4.7750, 2.0315) in fp32.
/// bf16_operands rounds X, X X^T, c1 A + c2 A A and each new X to bf16 (fp32 accumulation): the
/// CUDA step's arithmetic (kernels/cuda/muon.h), used as its twin in tests.
void muon_orthogonalize(const float* U0, int64_t rows, int64_t cols, int64_t steps, bool bf16_operands, float* O);
void muon_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);
/// Whether GaLore recomputes a matrix's projector at step t (1-based): the paper form only when it
/// is still all zero (computed once), the reference form every update_proj_gap steps (t-1 a
/// multiple of it) or when all zero.
bool galore_refresh_due(const OptimizerConfig& opt, const ParamPolicy& pol, int64_t t, bool projector_zero);

/// The projector of matrix e of GaLore parameter p from its fp32 gradient G (rows x cols,
/// row-major), sign-canonical (docs/optimizers.md "GaLore"): the reference form writes Pe
/// (r x cols when rows >= cols, else rows x r) from an exact SVD (LAPACK); the paper form writes
/// Pe = U (rows x r) and Qe = V^T (r x cols) from the randomized SVD keyed by (seed, t, p.index, e),
/// e the matrix's index in the whole bank (a slot over some experts adds its first matrix).
/// Host code; also used by the CUDA step (on a host copy of G). Throws skew::Error when LAPACK fails.
void galore_projector(const OptimizerConfig& opt, const ParamPolicy& pol, const ParamInfo& p, const OptimStep& step,
                      int64_t e, const float* G, float* Pe, float* Qe);
void galore_step(const OptimizerConfig& opt, const ParamSlot& s, const ParamPolicy& pol, const OptimStep& step);

/// Plain Adam on a slot with the given moments (m, v fp32 numel): update
/// (m/bc1)/(sqrt(v/bc2)+eps) when bias_correct, else m/(sqrt(v)+eps); written with lr_update and
/// decay keep. Used by AdamW, Muon's internal Adam and GaLore's unprojected parameters.
void adam_elementwise(const OptimizerConfig& opt, const ParamSlot& s, float* m, float* v, double b1, double b2,
                      double eps, bool bias_correct, double lr_update, double wd, const OptimStep& step);

}  // namespace skew::optim_detail
