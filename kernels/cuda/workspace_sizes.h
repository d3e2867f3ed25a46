// Device scratch sizes of the CUDA backend's ops: one source for the kernels (which lay their
// scratch out by these formulas) and for the memory plan (which reserves them in the arena, so a
// CUDA run allocates nothing beyond the plan). Pure integer math on shapes; no CUDA needed, so
// `skew plan` sizes a CUDA run on any machine. Header-only and free of fmt (nvcc includes it).
#pragma once
#include <algorithm>
#include <cstdint>

namespace skew::cuda_ws {

inline int64_t align16(int64_t x) { return (x + 15) / 16 * 16; }
inline int64_t align256(int64_t x) { return (x + 255) / 256 * 256; }

// ---- constants the kernels partition their work by (changing one changes the scratch)
constexpr int COUNTING_SORT_CHUNK = 512;                 // keys per chunk of the counting sort
constexpr int LAYERNORM_PARAM_ROW_CHUNK = 256;           // rows per partial sum of LayerNorm dweight/dbias
constexpr int64_t SUM_SQUARES_CHUNK = int64_t(1) << 16;  // elements per block of the grad-norm
constexpr int64_t SUM_SQUARES_DESC_BYTES = 32;           // sizeof(SumSqDesc) in elementwise.cu
constexpr int64_t OPTIM_SEG_COLS = 2048;          // columns of one optimizer work item (256 threads x 8 elements)
constexpr int64_t OPTIM_WARP_COLS = 256;          // columns of one warp's row partial (32 lanes x 8 elements)
constexpr int64_t OPTIM_ROW_TILES = 16;           // row tiles of the factored column partials
constexpr int64_t OPTIM_SUMSQ_MAX_BLOCKS = 2048;  // cap of the per-matrix RMS partition
constexpr int64_t LM_HEAD_CHUNK_LOGITS = int64_t(1) << 25;  // fp32 logits per chunk of the fused head (128 MiB)

/// Scratch of counting_sort for n keys in [0, n_keys): per-chunk counts (int32) + per-key totals (int64).
inline int64_t counting_sort_scratch_bytes(int64_t n, int64_t n_keys) {
    const int64_t chunks = (n + COUNTING_SORT_CHUNK - 1) / COUNTING_SORT_CHUNK;
    return align16(chunks * n_keys * 4) + n_keys * 8;
}

/// Scratch of embedding_backward: sorted positions (n int64) + row offsets (vocab_rows + 1 int64) + the sort's.
inline int64_t embedding_backward_scratch_bytes(int64_t batch, int64_t seq_len, int64_t vocab_rows) {
    const int64_t n = batch * seq_len;
    return align16(n * 8) + align16((vocab_rows + 1) * 8) + counting_sort_scratch_bytes(n, vocab_rows);
}

/// Row chunks of LayerNorm backward's parameter-gradient partial sums.
inline int64_t layernorm_param_chunks(int64_t n_rows) {
    return (n_rows + LAYERNORM_PARAM_ROW_CHUNK - 1) / LAYERNORM_PARAM_ROW_CHUNK;
}

/// Scratch of layernorm_backward: fp32 partial dweight and dbias, (chunks, channels) each.
inline int64_t layernorm_backward_scratch_bytes(int64_t n_rows, int64_t channels) {
    return 2 * layernorm_param_chunks(n_rows) * channels * 4;
}

/// Scratch of rmsnorm_backward: fp32 partial dweight, (chunks, channels) (half of LayerNorm's).
inline int64_t rmsnorm_backward_scratch_bytes(int64_t n_rows, int64_t channels) {
    return layernorm_param_chunks(n_rows) * channels * 4;
}

/// Scratch of bias_add_backward: fp32 partial column sums, (chunks, channels) (as RMSNorm's dweight).
inline int64_t bias_add_backward_scratch_bytes(int64_t n_rows, int64_t channels) {
    return layernorm_param_chunks(n_rows) * channels * 4;
}

/// Scratch of attention_backward: the per-row D = <dout, out>, (batch, n_heads, seq_len) fp32.
inline int64_t attention_backward_scratch_bytes(int64_t batch, int64_t n_heads, int64_t seq_len) {
    return std::max<int64_t>(1, batch * n_heads * seq_len) * 4;
}

/// Scratch of moe_router_forward: per-expert counts (uint64) and mean probabilities (double), per-token z (double).
inline int64_t moe_router_forward_scratch_bytes(int64_t n_tokens, int64_t n_experts) {
    return align16(n_experts * 8) + align16(n_experts * 8) + align16(std::max<int64_t>(1, n_tokens) * 8);
}

/// Scratch of moe_dispatch: the counting sort of n_tokens * top_k copies by expert.
inline int64_t moe_dispatch_scratch_bytes(int64_t n_tokens, int64_t top_k, int64_t n_experts) {
    return counting_sort_scratch_bytes(n_tokens * top_k, n_experts);
}

/// Scratch of the cuBLAS grouped expert GEMM (kernels/cuda/moe_matmul.h): the device arrays of A,
/// B and C pointers, one entry per expert each.
inline int64_t moe_matmul_scratch_bytes(int64_t n_experts) { return align16(3 * std::max<int64_t>(1, n_experts) * 8); }

/// Blocks of the grad-norm reduction over a buffer of numel elements.
inline int64_t sum_squares_blocks(int64_t numel) { return (numel + SUM_SQUARES_CHUNK - 1) / SUM_SQUARES_CHUNK; }

/// Scratch of sum_squares over n_buffers buffers split into total_blocks blocks (sum of
/// sum_squares_blocks): the descriptors and one double partial per block (+2).
inline int64_t sum_squares_scratch_bytes(int64_t n_buffers, int64_t total_blocks) {
    return align16(n_buffers * SUM_SQUARES_DESC_BYTES) + (total_blocks + 2) * 8;
}

/// Layout of the fused LM head's workspace for n_tokens tokens (kernels/cuda/workspace_sizes.h is its one
/// source; kernels/cuda/cross_entropy.cu lays the workspace out by it). Three layouts:
/// - one chunk (n_tokens <= LM_HEAD_CHUNK_LOGITS / Vp tokens): fp32 logits (n, Vp) and, with bf16
///   operands, bf16 dlogits (n, Vp); dx and dwte are one product each, so no accumulator;
/// - whole dlogits (bf16 operands, n_tokens <= chunk + 2·d_model): fp32 logits of one chunk and the
///   bf16 dlogits of every token (n, Vp); dx and dwte are one product each over all tokens (k =
///   n_tokens for dwte, rounded once), 4·chunk·Vp + 2·n·Vp bytes;
/// - accumulator: fp32 logits and (bf16 operands) bf16 dlogits of one chunk, and an fp32 dwte
///   accumulator (Vp, d_model) so that a bf16 dwte is rounded once.
/// With fp32 operands the dlogits are written in place over the logits. Whole dlogits is taken
/// whenever it costs no more than the accumulator; beyond one chunk both cost less than one chunk
/// over all tokens (paper model, microbatch 16: 2,048 tokens take 335 MB instead of 618 MB).
struct LmHeadLayout {
    int64_t chunk_tokens = 1;          // tokens per chunk of fp32 logits
    bool whole_dlogits = false;        // bf16 dlogits of every token kept for one dx and one dwte product
    int64_t dlogits_region_bytes = 0;  // bytes after the logits: dlogits and/or the fp32 accumulator
};

/// The layout for n_tokens tokens, d_model columns and padded_vocab_size rows of the tied table;
/// bf16_operands: x and wte are bf16 (the model's head), else fp32.
inline LmHeadLayout lm_head_layout(int64_t n_tokens, int64_t d_model, int64_t padded_vocab_size, bool bf16_operands) {
    const int64_t n = std::max<int64_t>(1, n_tokens), Vp = std::max<int64_t>(1, padded_vocab_size);
    int64_t cap = LM_HEAD_CHUNK_LOGITS / Vp;
    if (cap >= 64) cap = cap / 64 * 64;
    cap = std::max<int64_t>(1, cap);
    LmHeadLayout l;
    if (n <= cap) {
        l.chunk_tokens = n;
        l.dlogits_region_bytes = bf16_operands ? align256(n * Vp * 2) : 0;
        return l;
    }
    l.chunk_tokens = cap;
    if (bf16_operands && n <= cap + 2 * d_model) {
        l.whole_dlogits = true;
        l.dlogits_region_bytes = align256(n * Vp * 2);
        return l;
    }
    l.dlogits_region_bytes = (bf16_operands ? align256(cap * Vp * 2) : 0) + align256(Vp * d_model * 4);
    return l;
}

/// Workspace of lm_head_cross_entropy: fp32 logits (chunk, Vp) | the dlogits region | per-token
/// losses (n_tokens fp32).
inline int64_t lm_head_workspace_bytes(int64_t n_tokens, int64_t d_model, int64_t padded_vocab_size,
                                       bool bf16_operands) {
    const LmHeadLayout l = lm_head_layout(n_tokens, d_model, padded_vocab_size, bf16_operands);
    return align256(l.chunk_tokens * padded_vocab_size * 4) + l.dlogits_region_bytes +
           align256(std::max<int64_t>(1, n_tokens) * 4);
}

/// Rows of one row tile of the factored statistics (OPTIM_ROW_TILES tiles per matrix at most).
inline int64_t optim_tile_rows(int64_t rows) {
    return std::max<int64_t>(1, (rows + OPTIM_ROW_TILES - 1) / OPTIM_ROW_TILES);
}
/// Row tiles of a matrix of `rows` rows.
inline int64_t optim_row_tiles(int64_t rows) { return (rows + optim_tile_rows(rows) - 1) / optim_tile_rows(rows); }
/// Warp column tiles (OPTIM_WARP_COLS wide) of a matrix of `cols` columns.
inline int64_t optim_warp_col_tiles(int64_t cols) { return (cols + OPTIM_WARP_COLS - 1) / OPTIM_WARP_COLS; }
/// Work items (row, 2048-column segment) of one matrix.
inline int64_t optim_items(int64_t rows, int64_t cols) { return rows * ((cols + OPTIM_SEG_COLS - 1) / OPTIM_SEG_COLS); }
/// Blocks per matrix of the update-RMS and apply passes (a pure function of the shape, so the RMS
/// partition, and with it the result, is fixed).
inline int64_t optim_update_blocks(int64_t rows, int64_t cols) {
    return std::clamp<int64_t>((optim_items(rows, cols) + 3) / 4, 1, OPTIM_SUMSQ_MAX_BLOCKS);
}

/// Scratch of the SkewAdam/Adafactor update of n_mat matrices of rows x cols: [factored, i.e. not
/// n_mat = rows = 1] fp64 row partials per warp column tile and column partials per row tile, fp32
/// row and column scales; then the per-matrix clip and the per-matrix RMS partials (fp64).
inline int64_t optim_update_scratch_bytes(int64_t n_mat, int64_t rows, int64_t cols) {
    int64_t b = align256(4 * n_mat) + align256(8 * n_mat * optim_update_blocks(rows, cols));
    if (n_mat == 1 && rows == 1) return b;
    return b + align256(8 * n_mat * optim_warp_col_tiles(cols) * rows) +
           align256(8 * n_mat * optim_row_tiles(rows) * cols) + align256(4 * n_mat * rows) + align256(4 * n_mat * cols);
}

// ---- Muon on bf16 tensor cores (kernels/cuda/muon.cu)
constexpr int MUON_NORM_BLOCKS = 64;                            // fixed partition of the per-matrix Frobenius norm
constexpr int64_t MUON_CHUNK_BYTES = int64_t(512) << 20;        // bf16 Newton-Schulz buffers of one chunk of matrices
constexpr int64_t MUON_LT_WORKSPACE_BYTES = int64_t(32) << 20;  // cuBLASLt workspace of the batched products

/// Elements one matrix occupies in a strided batch (rounded up to 8 so that every matrix starts
/// 16-byte aligned in bf16).
inline int64_t muon_batch_stride(int64_t elems) { return (elems + 7) / 8 * 8; }

/// bf16 Newton-Schulz bytes of one rows x cols matrix: X and the next X (rows*cols each), X X^T and
/// c1 A + c2 A A (a x a each, a = min(rows, cols)).
inline int64_t muon_matrix_bytes(int64_t rows, int64_t cols) {
    const int64_t a = std::min(rows, cols);
    return 2 * 2 * muon_batch_stride(rows * cols) + 2 * 2 * muon_batch_stride(a * a);
}

/// Matrices of a Muon tensor orthogonalized together (one strided batch): as many as fit in
/// MUON_CHUNK_BYTES, at least 1, at most n_mat.
inline int64_t muon_chunk_matrices(int64_t n_mat, int64_t rows, int64_t cols) {
    return std::clamp<int64_t>(MUON_CHUNK_BYTES / std::max<int64_t>(1, muon_matrix_bytes(rows, cols)), 1,
                               std::max<int64_t>(1, n_mat));
}

/// Scratch of cuda::muon_step on n_mat matrices of rows x cols: the cuBLASLt workspace, the bf16
/// buffers of one chunk (X, next X, A, B), the Frobenius partials (double, MUON_NORM_BLOCKS per
/// matrix). 256-byte aligned pieces in that order.
inline int64_t muon_scratch_bytes(int64_t n_mat, int64_t rows, int64_t cols) {
    const int64_t c = muon_chunk_matrices(n_mat, rows, cols), a = std::min(rows, cols);
    return MUON_LT_WORKSPACE_BYTES + 2 * align256(2 * c * muon_batch_stride(rows * cols)) +
           2 * align256(2 * c * muon_batch_stride(a * a)) + align256(8 * c * MUON_NORM_BLOCKS);
}

// ---- GaLore on the GPU (optim/galore_cuda.cpp)
constexpr int64_t GALORE_CHUNK_BYTES = int64_t(512) << 20;  // fp32 buffers of one chunk of matrices

/// Elements of GaLore's projected gradient of a rows x cols matrix at rank r: r x r (paper form),
/// rows x r (reference, rows >= cols) or r x cols (reference, rows < cols).
inline int64_t galore_proj_elems(int64_t rows, int64_t cols, int64_t r, bool paper) {
    return paper ? r * r : rows >= cols ? rows * r : r * cols;
}

/// fp32 bytes of one matrix: the widened gradient, the back-projected update (rows x cols each),
/// the projected gradient and (paper form) the rows x r intermediate.
inline int64_t galore_matrix_bytes(int64_t rows, int64_t cols, int64_t r, bool paper) {
    return 4 * (2 * rows * cols + galore_proj_elems(rows, cols, r, paper) + (paper ? rows * r : 0));
}

/// Matrices of a GaLore tensor processed together: as many as fit in GALORE_CHUNK_BYTES, at least 1.
inline int64_t galore_chunk_matrices(int64_t n_mat, int64_t rows, int64_t cols, int64_t r, bool paper) {
    return std::clamp<int64_t>(GALORE_CHUNK_BYTES / std::max<int64_t>(1, galore_matrix_bytes(rows, cols, r, paper)), 1,
                               std::max<int64_t>(1, n_mat));
}

/// Scratch of the CUDA GaLore step on n_mat matrices of rows x cols at rank r: for one chunk the
/// widened gradient, the back-projected update, the projected gradient, (paper) the rows x r
/// intermediate; then one int32 flag per matrix. 256-byte aligned pieces in that order.
inline int64_t galore_scratch_bytes(int64_t n_mat, int64_t rows, int64_t cols, int64_t r, bool paper) {
    const int64_t c = galore_chunk_matrices(n_mat, rows, cols, r, paper);
    return 2 * align256(4 * c * rows * cols) + align256(4 * c * galore_proj_elems(rows, cols, r, paper)) +
           align256(paper ? 4 * c * rows * r : 0) + align256(4 * std::max<int64_t>(1, n_mat));
}

}  // namespace skew::cuda_ws
