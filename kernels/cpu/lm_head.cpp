// CPU fused tied LM head + cross-entropy (docs/design.md: GPT-2 vocabulary padded to 50,304, tied
// embedding and LM head; bf16 storage, fp32 accumulation). The logits of a chunk of tokens are
// produced, reduced and differentiated one tile (chunk x LM_HEAD_BLOCK_COLS vocabulary columns) at
// a time while the tile is in cache, so the (tokens x vocab) logits are written once and read once:
//   pass 1, per tile: logits = x · wte^T (OpenBLAS sgemm), then per token the tile's max and an
//           online sum of exponentials (the running sum rescaled when the max grows);
//   merge,  per token: max and sum over the vocabulary groups in a fixed order -> loss;
//   pass 2, per tile: dlogits = grad_scale · (softmax - onehot) in place, then the input gradient
//           dx += dlogits · wte and the embedding gradient dwte[tile] += dlogits^T · x.
// The vocabulary is split into LM_HEAD_VOCAB_GROUPS fixed groups of consecutive tiles, the unit
// of parallel work (OpenMP, one single-threaded product per tile): every sum runs in an order
// fixed by the shapes alone, so results do not depend on the thread count. The element-wise tile
// code is compiled for AVX-512, AVX2 and baseline x86-64 (SKEW_CPU_CLONES) from one source that has
// no fused multiply-adds (-ffp-contract=off): all give the same bits, so which one a CPU runs changes
// nothing (the products are OpenBLAS's sgemm, as for every CPU matmul; no bf16 arithmetic).
// Every buffer is a region of the caller's workspace (kernels/cpu/workspace_sizes.h).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/workspace_sizes.h"

namespace skew::cpu {

namespace {

/// Tiles [first, last) of vocabulary group g out of n_tiles.
void group_tiles(int64_t g, int64_t n_tiles, int64_t& first, int64_t& last) {
    first = g * n_tiles / cpu_ws::LM_HEAD_VOCAB_GROUPS;
    last = (g + 1) * n_tiles / cpu_ws::LM_HEAD_VOCAB_GROUPS;
}

/// Carves consecutive 64-byte-aligned regions out of the workspace (kernels/cpu/workspace_sizes.h order).
struct Carver {
    char* p;
    template <class T>
    T* take(int64_t elems) {
        T* r = reinterpret_cast<T*>(p);
        p += cpu_ws::align64(elems * int64_t(sizeof(T)));
        return r;
    }
};

}  // namespace

/// Per row r of a tile t (rows x cols, row stride ld; cols the columns of the real vocabulary):
/// the running max gmax[r] and sum of exp(t - gmax) gsum[r] take in the tile. The sum rescales
/// by exp(old max - new max) when the max grows; the tile's exponentials are summed in eight fp32
/// lanes (lane l: columns l, l + 8, l + 16, ... in order), added to the fp64 sum in lane order,
/// then the tail.
SKEW_CPU_CLONES void lm_head_tile_softmax_stats(const float* t, int64_t ld, int64_t rows, int64_t cols, float* gmax,
                                                double* gsum) {
    const int64_t c8 = cols - cols % 8;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = t + r * ld;
        f32x16 mv = f32x16{} - INFINITY;  // a max is exact in any order
        int64_t c = 0;
        for (; c + 16 <= c8; c += 16) {
            f32x16 v;
            std::memcpy(&v, x + c, sizeof(v));
            mv = v > mv ? v : mv;
        }
        float bm = -INFINITY;
        for (int l = 0; l < 16; ++l) bm = std::max(bm, mv[l]);
        for (; c < cols; ++c) bm = std::max(bm, x[c]);
        const float old = gmax[r];
        const float mx = std::max(old, bm);
        double sum = gsum[r];
        if (mx > old) sum = old == -INFINITY ? 0.0 : sum * double(exp_nonpos_f32(old - mx));
        // exponentials 16 at a time, added into the eight lanes in column order (the sum's order
        // is the source's, whatever the clone's vector width)
        f32x8 acc = f32x8{};
        for (c = 0; c + 16 <= c8; c += 16) {
            f32x16 v, e;
            std::memcpy(&v, x + c, sizeof(v));
            v -= mx;
            exp_nonpos_lanes<f32x16, i32x16>(e, v);
            f32x8 lo, hi;
            std::memcpy(&lo, &e, sizeof(lo));
            std::memcpy(&hi, reinterpret_cast<const char*>(&e) + sizeof(lo), sizeof(hi));
            acc += lo;
            acc += hi;
        }
        for (; c < c8; c += 8) {
            f32x8 v, e;
            std::memcpy(&v, x + c, sizeof(v));
            v -= mx;
            exp_nonpos_lanes<f32x8, i32x8>(e, v);
            acc += e;
        }
        for (int l = 0; l < 8; ++l) sum += double(acc[l]);
        for (; c < cols; ++c) sum += double(exp_nonpos_f32(x[c] - mx));
        gmax[r] = mx;
        gsum[r] = sum;
    }
}

/// The tile (rows x cols, stride ld; its first column is vocabulary column c0) overwritten by its
/// gradient: exp(t - row_max[r]) · row_inv[r] for columns < V, 0 for the padding, and grad_scale
/// subtracted at the row's target column.
SKEW_CPU_CLONES void lm_head_tile_dlogits(float* t, int64_t ld, int64_t rows, int64_t c0, int64_t cols, int64_t V,
                                          const float* row_max, const float* row_inv, const int32_t* targets,
                                          float grad_scale) {
    const int64_t real = std::clamp<int64_t>(V - c0, 0, cols), r8 = real - real % 8;
    for (int64_t r = 0; r < rows; ++r) {
        float* x = t + r * ld;
        const float mx = row_max[r], inv = row_inv[r];
        int64_t c = 0;
        for (; c + 16 <= r8; c += 16) {
            f32x16 v, e;
            std::memcpy(&v, x + c, sizeof(v));
            v -= mx;
            exp_nonpos_lanes<f32x16, i32x16>(e, v);
            e *= inv;
            std::memcpy(x + c, &e, sizeof(e));
        }
        for (; c < r8; c += 8) {
            f32x8 v, e;
            std::memcpy(&v, x + c, sizeof(v));
            v -= mx;
            exp_nonpos_lanes<f32x8, i32x8>(e, v);
            e *= inv;
            std::memcpy(x + c, &e, sizeof(e));
        }
        for (int64_t c = r8; c < real; ++c) x[c] = exp_nonpos_f32(x[c] - mx) * inv;
        for (int64_t c = real; c < cols; ++c) x[c] = 0.0f;
        const int64_t tc = int64_t(targets[r]) - c0;
        if (tc >= 0 && tc < cols) x[tc] -= grad_scale;
    }
}

int64_t lm_head_chunk_tokens(const ClassifierShape& s) { return cpu_ws::lm_head_chunk_tokens(s.n_tokens); }

int64_t lm_head_workspace_bytes(const ClassifierShape& s) {
    return cpu_ws::lm_head_workspace_bytes(s.n_tokens, s.d_model, s.padded_vocab_size);
}

void lm_head_cross_entropy(float* mean_loss, float* losses, TensorRef dx, TensorRef dwte, ConstTensorRef x,
                           ConstTensorRef wte, const int32_t* targets, float dloss, const ClassifierShape& s,
                           void* workspace) {
    const int64_t n = s.n_tokens, C = s.d_model, V = s.vocab_size, Vp = s.padded_vocab_size;
    cross_entropy_check_args("lm_head_cross_entropy", targets, n, V, Vp);
    check_nonneg("lm_head_cross_entropy d_model", C);
    if (!workspace && n > 0) fail("lm_head_cross_entropy: null workspace (size from lm_head_workspace_bytes)");
    if (n == 0) {
        if (mean_loss) *mean_loss = 0.0f;
        return;
    }
    if (C > INT32_MAX || Vp > INT32_MAX) fail("lm_head_cross_entropy: shape exceeds the BLAS 32-bit index range");
    constexpr int64_t G = cpu_ws::LM_HEAD_VOCAB_GROUPS, TB = cpu_ws::LM_HEAD_BLOCK_COLS;
    const int64_t chunk = cpu_ws::lm_head_chunk_tokens(n);
    Carver ws{static_cast<char*>(workspace)};
    float* logits = ws.take<float>(chunk * Vp);      // tile t: (m, cw) at column offset c0 times m
    float* wte32 = ws.take<float>(Vp * C);           // (Vp, C): wte widened once, when bf16
    float* dwte_acc = ws.take<float>(Vp * C);        // (Vp, C): fp32 accumulator, when dwte is bf16
    float* x32 = ws.take<float>(chunk * C);          // (chunk, C): the chunk's x widened, when bf16
    float* dx_part = ws.take<float>(G * chunk * C);  // (G, chunk, C): per-group dx partials
    float* gmax = ws.take<float>((G + 2) * chunk);   // (G, chunk) running max, then row max, 1/sum
    double* gsum = ws.take<double>(G * chunk);       // (G, chunk)
    float* tgt_logit = ws.take<float>(n);
    float* local_losses = ws.take<float>(n);
    if (!losses) losses = local_losses;
    float* row_max = gmax + G * chunk;
    float* row_inv = row_max + chunk;

    const BlasSerialScope serial_blas;  // one single-threaded product per OpenMP thread
    // bf16 wte is widened into wte32 tile by tile in the first chunk's pass 1, just before the
    // tile's product reads it (in cache); later chunks and pass 2 read the widened rows
    const bool widen_wte = wte.type == ScalarType::BF16;
    const float* w = widen_wte ? wte32 : static_cast<const float*>(wte.data);
    float* dw = nullptr;  // fp32 (Vp, C) the embedding gradient accumulates into
    if (dwte) dw = dwte.type == ScalarType::F32 ? static_cast<float*>(dwte.data) : dwte_acc;
    const bool backward = dx || dwte;
    const float grad_scale = dloss / float(n);
    const int64_t n_tiles = (Vp + TB - 1) / TB;

    for (int64_t i0 = 0; i0 < n; i0 += chunk) {
        const int64_t m = std::min(chunk, n - i0);
        const int32_t* tg = targets + i0;
        const float* xc = static_cast<const float*>(x.data) + i0 * C;
        if (x.type == ScalarType::BF16) {
            convert(x32, offset(x, i0 * C), m * C);
            xc = x32;
        }

        // pass 1: logits tiles and per-group online softmax statistics
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t g = 0; g < G; ++g) {
            float* gm = gmax + g * chunk;
            double* gs = gsum + g * chunk;
            std::fill(gm, gm + m, -INFINITY);
            std::fill(gs, gs + m, 0.0);
            int64_t t0, t1;
            group_tiles(g, n_tiles, t0, t1);
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t c0 = t * TB, cw = std::min(TB, Vp - c0);
                float* tile = logits + c0 * m;  // (m, cw), contiguous
                if (widen_wte && i0 == 0) {
                    const bf16* src = static_cast<const bf16*>(wte.data) + c0 * C;
                    for (int64_t e = 0; e < cw * C; ++e) wte32[c0 * C + e] = bf16_to_f32(src[e]);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(cw), int(C), 1.0f, xc, int(C),
                            w + c0 * C, int(C), 0.0f, tile, int(cw));
                lm_head_tile_softmax_stats(tile, cw, m, std::clamp<int64_t>(V - c0, 0, cw), gm, gs);
                for (int64_t r = 0; r < m; ++r)
                    if (tg[r] >= c0 && tg[r] < c0 + cw) tgt_logit[i0 + r] = tile[r * cw + (tg[r] - c0)];
            }
        }

        // merge the groups in order: loss, row max and grad_scale / sum per token
        for (int64_t r = 0; r < m; ++r) {
            float mx = -INFINITY;
            for (int64_t g = 0; g < G; ++g) mx = std::max(mx, gmax[g * chunk + r]);
            double sum = 0.0;
            for (int64_t g = 0; g < G; ++g)
                if (gsum[g * chunk + r] > 0.0)
                    sum += gsum[g * chunk + r] * double(exp_nonpos_f32(gmax[g * chunk + r] - mx));
            losses[i0 + r] = float(double(mx) + std::log(sum) - double(tgt_logit[i0 + r]));
            row_max[r] = mx;
            row_inv[r] = float(double(grad_scale) / sum);
        }
        if (!backward) continue;

            // pass 2: tile gradients in place, then their products for dx (per-group partial) and dwte
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t g = 0; g < G; ++g) {
            int64_t t0, t1;
            group_tiles(g, n_tiles, t0, t1);
            float* dxg = dx_part + g * chunk * C;
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t c0 = t * TB, cw = std::min(TB, Vp - c0);
                float* tile = logits + c0 * m;
                lm_head_tile_dlogits(tile, cw, m, c0, cw, V, row_max, row_inv, tg, grad_scale);
                if (dx)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(C), int(cw), 1.0f, tile, int(cw),
                                w + c0 * C, int(C), t == t0 ? 0.0f : 1.0f, dxg, int(C));
                if (dw) {
                    // the bf16 gradient's accumulator starts at the first chunk (no zeroing pass)
                    const float beta = dw == dwte_acc && i0 == 0 ? 0.0f : 1.0f;
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(cw), int(C), int(m), 1.0f, tile, int(cw),
                                xc, int(C), beta, dw + c0 * C, int(C));
                }
            }
        }
        if (dx) {  // dx rows = the non-empty groups' partials, added in group order
            bool used[G];
            for (int64_t g = 0; g < G; ++g) {
                int64_t t0, t1;
                group_tiles(g, n_tiles, t0, t1);
                used[g] = t1 > t0;
            }
#pragma omp parallel for schedule(static) if (m * C * G > kParallelMinWork)
            for (int64_t r = 0; r < m; ++r) {
                for (int64_t c = 0; c < C; ++c) {
                    float v = 0.0f;
                    for (int64_t g = 0; g < G; ++g)
                        if (used[g]) v += dx_part[(g * chunk + r) * C + c];
                    store_at(dx, (i0 + r) * C + c, v);
                }
            }
        }
    }
    if (dwte && dwte.type == ScalarType::BF16) accumulate(dwte, dwte_acc, Vp * C);
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += losses[i];
    if (mean_loss) *mean_loss = float(total / double(n));
}

}  // namespace skew::cpu
