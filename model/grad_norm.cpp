// The gradient's global norm and its clipping (paper Section 4; docs/design.md "Deferred expert
// gradients"): sums of squares over the stored gradients, the deferred expert banks' norms from
// their kept operands by Gram products, and the expert-parallel group's share.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"
#include "model/model.h"

namespace skew {

double gram_grad_sq_norm(const float* X, const float* dY, int64_t rows, int64_t in_features, int64_t out_features) {
    double total = 0.0;
#pragma omp parallel for schedule(dynamic) reduction(+ : total) if (rows > 64)
    for (int64_t i = 0; i < rows; ++i) {
        const float* xi = X + i * in_features;
        const float* yi = dY + i * out_features;
        double row = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
            const float* xj = X + j * in_features;
            const float* yj = dY + j * out_features;
            double gx = 0.0, gy = 0.0;
            for (int64_t c = 0; c < in_features; ++c) gx += double(xi[c]) * double(xj[c]);
            for (int64_t c = 0; c < out_features; ++c) gy += double(yi[c]) * double(yj[c]);
            row += (j == i ? 1.0 : 2.0) * gx * gy;
        }
        total += row;
    }
    return total;
}

RowWindow gram_row_window(int64_t first, int64_t rows, int64_t max_rows, int64_t total_rows, int64_t granularity) {
    if (rows < 0 || first < 0 || first + rows > total_rows || rows > max_rows || max_rows > total_rows ||
        granularity < 1)
        fail("gram_row_window: rows [{}, {}) of {} (at most {} at a time, granularity {})", first, first + rows,
             total_rows, max_rows, granularity);
    const int64_t want = std::min(max_rows, (rows + granularity - 1) / granularity * granularity);
    // start at `first` unless the window would run past the buffer's end; then end at the end
    return RowWindow{std::min(first, total_rows - want), want};
}

double deferred_expert_grad_sq_norm(Model& m) {
    return deferred_expert_grad_sq_norm(m, m.backend->matmul_row_granularity());
}

double deferred_expert_grad_sq_norm(Model& m, int64_t granularity) {
    if (!m.deferred.on) return 0.0;
    Backend& be = *m.backend;
    const ModelConfig& c = m.cfg->model;
    const struct { int64_t E, NK, d, de; } x{c.n_experts, m.microbatch * m.seq_len * c.top_k, c.d_model, c.d_expert};
    const DeferredExperts& df = m.deferred;
    float* partials = df.gram;  // (3 E): w1, w2, w3 of expert e at 3 e + bank
    float* gx = df.gram + df.gram_partials;
    float* gy = gx + df.gram_rows * df.gram_rows;
    struct Block {
        const KeptExpertOperands* k;
        int64_t r0, rows;
    };
    std::vector<Block> blocks;
    std::vector<float> host(size_t(3 * x.E));
    double total = 0.0;
    for (const auto& per_block : df.kept) {
        bool any = false;
        for (const KeptExpertOperands& k : per_block) any = any || !k.offsets.empty();
        if (!any) continue;  // a dense block, or no microbatch run this step
        be.zero(TensorRef(partials), 3 * x.E);
        for (int64_t e = 0; e < x.E; ++e) {
            // the expert's rows over the step's microbatches, in blocks of at most gram_rows
            blocks.clear();
            for (const KeptExpertOperands& k : per_block) {
                if (k.offsets.empty()) continue;  // microbatch not run this step
                const int64_t end = k.offsets[size_t(e + 1)];
                for (int64_t r = k.offsets[size_t(e)]; r < end; r += df.gram_rows)
                    blocks.push_back(Block{&k, r, std::min(df.gram_rows, end - r)});
            }
            for (size_t i = 0; i < blocks.size(); ++i)
                for (size_t j = i; j < blocks.size(); ++j) {
                    const Block &p = blocks[i], &q = blocks[j];
                    const RowWindow wp = gram_row_window(p.r0, p.rows, df.gram_rows, x.NK, granularity);
                    const RowWindow wq = gram_row_window(q.r0, q.rows, df.gram_rows, x.NK, granularity);
                    // G = A_p A_q^T over the windows (wp.rows, wq.rows) fp32, rows of `width` bf16 values;
                    // the blocks' entries start at (p.r0 - wp.first, q.r0 - wq.first)
                    auto gram = [&](float* g, const bf16* A, const bf16* B, int64_t width) {
                        be.matmul(TensorRef(g), ConstTensorRef(A + wp.first * width),
                                  ConstTensorRef(B + wq.first * width),
                                  MatmulShape{wp.rows, wq.rows, width, false, true, 1.0f, 0.0f});
                    };
                    // partial += w <G_X, G_Y> over the blocks' entries: the pair (j, i) contributes the same again
                    const int64_t at = (p.r0 - wp.first) * wq.rows + (q.r0 - wq.first);
                    auto dot = [&](int64_t bank) {
                        be.dot_accumulate(partials + 3 * e + bank, gx + at, gy + at, p.rows, q.rows, wq.rows,
                                          i == j ? 1.0f : 2.0f);
                    };
                    gram(gx, p.k->moe_in, q.k->moe_in, x.d);
                    gram(gy, p.k->d_moe_h1, q.k->d_moe_h1, x.de);
                    dot(0);
                    gram(gy, p.k->d_moe_h2, q.k->d_moe_h2, x.de);
                    dot(1);
                    gram(gx, p.k->moe_act, q.k->moe_act, x.de);
                    gram(gy, p.k->d_moe_out, q.k->d_moe_out, x.d);
                    dot(2);
                }
        }
        be.copy_to_host(host.data(), partials, int64_t(host.size() * sizeof(float)));
        for (float v : host) total += double(v);
    }
    return total;
}

double model_grad_norm(Model& m) {
    std::vector<BufferRef> bufs, expert_bufs;
    bufs.reserve(m.params.size());
    for (const ParamRef& p : m.params)
        if (p.grad)
            (m.ep.on() && p.info->tier == Tier::EXPERTS ? expert_bufs : bufs)
                .push_back(BufferRef{ConstTensorRef(p.grad), p.numel()});
    double sq = m.backend->sum_squares(bufs) + deferred_expert_grad_sq_norm(m);
    if (m.ep.on()) {  // each rank of the group holds other experts: their squares sum over the group
        double e2 = m.backend->sum_squares(expert_bufs);
        if (!m.ep.comm) fail("model: parallel.expert is {} but no expert-parallel group was attached", m.ep.M);
        auto* slot = reinterpret_cast<double*>(m.act.scalar(ACT_SCALAR_EP_SQ_NORM));
        m.backend->copy_to_device(slot, &e2, int64_t(sizeof(double)));
        m.ep.comm->allreduce_sum(slot, 1, CommDType::F64);
        m.backend->copy_to_host(&e2, slot, int64_t(sizeof(double)));
        sq += e2;
    }
    return std::sqrt(sq);
}

double model_clip_gradients(Model& m, double max_norm) {
    m.deferred.clip_coef = 1.0f;
    const double norm = model_grad_norm(m);
    if (max_norm <= 0.0 || !std::isfinite(norm)) return norm;
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
        for (const ParamRef& p : m.params)
            if (p.grad) m.backend->scale(p.grad, float(coef), p.numel());
        m.deferred.clip_coef = float(coef);
    }
    return norm;
}

}  // namespace skew
