// CUDA-core causal GQA attention, flash-style (FlashAttention-2's schedule: Dao 2023): tiles of 32
// queries x 32 keys in shared memory (bf16, rows padded one word against bank conflicts), online
// softmax in fp32, lse saved; the backward recomputes P from lse. Query head h reads KV head
// h / (H / KV). The fallback of attention_mma.cu (see attention_kernels.h). As there, a one-key
// row (row 0) has dS = 0 exactly.
#include <cmath>

#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"

namespace skew::cuda {

namespace {

constexpr int kTile = 32;     // queries per tile = keys per tile (one key per lane)
constexpr int kFwdWarps = 4;  // forward and dQ: 4 warps x 8 query rows
constexpr int kRowsPerWarp = kTile / kFwdWarps;
constexpr int kKvWarps = 8;  // dK/dV: 8 warps
constexpr int kKeysPerWarp = kTile / kKvWarps;

// Rows of a tile of kTile starting at row0 that lie before T.
__device__ __forceinline__ int tile_valid(int64_t T, int64_t row0) { return T - row0 < kTile ? int(T - row0) : kTile; }

// Whether lane owns dimension lane + 32c of a head of D dims (all lanes do when D % 32 == 0).
template <int D>
__device__ __forceinline__ bool dim_ok(int lane, int c) {
    return D % 32 == 0 || lane + 32 * c < D;
}

// Dot product of two bf16 rows of length D held in shared memory (4-byte aligned), fp32, its loop
// unrolled U words at a time (the forward unrolls it fully: at head_dim 64 a partial unroll left
// ptxas spilling 16 bytes on sm_80 and sm_90a; the backward kernels keep 16, which spill less).
template <int D, int U = 16>
__device__ __forceinline__ float dot_rows(const bf16* a, const bf16* b) {
    const uint32_t* aw = reinterpret_cast<const uint32_t*>(a);
    const uint32_t* bw = reinterpret_cast<const uint32_t*>(b);
    float s = 0.0f;
#pragma unroll U
    for (int i = 0; i < D / 2; ++i) {
        const uint32_t x = aw[i], y = bw[i];
        s += __uint_as_float(x << 16) * __uint_as_float(y << 16);
        s += __uint_as_float(x & 0xffff0000u) * __uint_as_float(y & 0xffff0000u);
    }
    return s;
}

// Copy `rows` rows (row stride src_stride elements) of D bf16 into smem rows of stride D + 2,
// zero-filling rows past `valid`.
template <int D>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16* __restrict__ src, int64_t src_stride, int valid) {
    constexpr int W = D / 2;  // 32-bit words per row
    for (int i = threadIdx.x; i < kTile * W; i += blockDim.x) {
        const int r = i / W, w = i - r * W;
        uint32_t val = 0;
        if (r < valid) val = reinterpret_cast<const uint32_t*>(src + r * src_stride)[w];
        reinterpret_cast<uint32_t*>(dst + r * (D + 2))[w] = val;
    }
}

// Block (query tile, b·H + h). Warp w owns query rows w·8 .. w·8+7; lane j is key j of each key tile.
// Tk keys per sequence (Tk >= T): query row t sits at position Tk - T + t.
template <int D>
__global__ void __launch_bounds__(kFwdWarps * 32)
    attention_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                             const bf16* __restrict__ k, const bf16* __restrict__ v, int64_t T, int64_t Tk, int64_t H,
                             int64_t KV, float scale) {
    constexpr int S = D + 2, C = (D + 31) / 32;
    __shared__ __align__(16) bf16 sQ[kTile * S], sK[kTile * S], sV[kTile * S];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // one flat grid (block = bh * tiles + query tile): B * H is not bounded by grid.y's 65,535
    const int64_t tiles = (T + kTile - 1) / kTile, bh = int64_t(blockIdx.x) / tiles, b = bh / H, h = bh % H,
                  g = h / (H / KV);
    const int64_t q0 = int64_t(blockIdx.x) % tiles * kTile;
    const int q_valid = tile_valid(T, q0);
    load_tile<D>(sQ, q + ((b * T + q0) * H + h) * D, H * D, q_valid);

    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][C];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[i][c] = 0.0f;
    }
    const int64_t off = Tk - T, last_key = off + q0 + q_valid - 1;  // off: the position of query row 0
    for (int64_t j0 = 0; j0 <= last_key; j0 += kTile) {
        __syncthreads();
        const int k_valid = tile_valid(Tk, j0);
        load_tile<D>(sK, k + ((b * Tk + j0) * KV + g) * D, KV * D, k_valid);
        load_tile<D>(sV, v + ((b * Tk + j0) * KV + g) * D, KV * D, k_valid);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
            const int r = warp * kRowsPerWarp + i;
            const int64_t t = off + q0 + r;        // the row's position
            if (r >= q_valid || j0 > t) continue;  // warp-uniform
            const int64_t j = j0 + lane;
            const float s = j <= t ? dot_rows<D, D / 2>(sQ + r * S, sK + lane * S) * scale : -INFINITY;
            const float m_new = fmaxf(m[i], warp_max(s));
            const float p = expf(s - m_new);
            const float corr = expf(m[i] - m_new);
            l[i] = l[i] * corr + warp_sum(p);
            m[i] = m_new;
#pragma unroll
            for (int c = 0; c < C; ++c) acc[i][c] *= corr;
            for (int jj = 0; jj < kTile; ++jj) {
                const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int c = 0; c < C; ++c)
                    if (dim_ok<D>(lane, c)) acc[i][c] += pj * ld(sV[jj * S + lane + 32 * c]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        if (r >= q_valid) continue;
        const int64_t t = q0 + r;
        const float inv = 1.0f / l[i];
        bf16* o = out + ((b * T + t) * H + h) * D;
#pragma unroll
        for (int c = 0; c < C; ++c)
            if (dim_ok<D>(lane, c)) st(o + lane + 32 * c, acc[i][c] * inv);
        if (lse && lane == 0) lse[(b * H + h) * T + t] = m[i] + logf(l[i]);
    }
}

// Block (query tile, b·H + h): dq = scale · Σ_j P_ij (dP_ij - D_i) k_j, P recomputed from lse.
template <int D>
__global__ void __launch_bounds__(kFwdWarps * 32)
    attention_backward_dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                                 const bf16* __restrict__ k, const bf16* __restrict__ v, const float* __restrict__ lse,
                                 const float* __restrict__ dvec, int64_t T, int64_t H, int64_t KV, float scale) {
    constexpr int S = D + 2, C = (D + 31) / 32;
    __shared__ __align__(16) bf16 sQ[kTile * S], sG[kTile * S], sK[kTile * S], sV[kTile * S];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // one flat grid (block = bh * tiles + query tile): B * H is not bounded by grid.y's 65,535
    const int64_t tiles = (T + kTile - 1) / kTile, bh = int64_t(blockIdx.x) / tiles, b = bh / H, h = bh % H,
                  g = h / (H / KV);
    const int64_t q0 = int64_t(blockIdx.x) % tiles * kTile;
    const int q_valid = tile_valid(T, q0);
    load_tile<D>(sQ, q + ((b * T + q0) * H + h) * D, H * D, q_valid);
    load_tile<D>(sG, dout + ((b * T + q0) * H + h) * D, H * D, q_valid);
    float row_lse[kRowsPerWarp], row_d[kRowsPerWarp], acc[kRowsPerWarp][C];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        row_lse[i] = r < q_valid ? lse[(b * H + h) * T + q0 + r] : 0.0f;
        row_d[i] = r < q_valid ? dvec[(b * H + h) * T + q0 + r] : 0.0f;
#pragma unroll
        for (int c = 0; c < C; ++c) acc[i][c] = 0.0f;
    }
    const int64_t last_key = q0 + q_valid - 1;
    for (int64_t j0 = 0; j0 <= last_key; j0 += kTile) {
        __syncthreads();
        const int k_valid = tile_valid(T, j0);
        load_tile<D>(sK, k + ((b * T + j0) * KV + g) * D, KV * D, k_valid);
        load_tile<D>(sV, v + ((b * T + j0) * KV + g) * D, KV * D, k_valid);
        __syncthreads();
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
            const int r = warp * kRowsPerWarp + i;
            const int64_t t = q0 + r;
            if (r >= q_valid || j0 > t) continue;
            const int64_t j = j0 + lane;
            float ds = 0.0f;
            if (j <= t && t > 0) {  // row 0 sees one key: dS = 0 exactly
                const float p = expf(dot_rows<D>(sQ + r * S, sK + lane * S) * scale - row_lse[i]);
                const float dp = dot_rows<D>(sG + r * S, sV + lane * S);
                ds = p * (dp - row_d[i]) * scale;
            }
            for (int jj = 0; jj < kTile; ++jj) {
                const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
                for (int c = 0; c < C; ++c)
                    if (dim_ok<D>(lane, c)) acc[i][c] += dsj * ld(sK[jj * S + lane + 32 * c]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp * kRowsPerWarp + i;
        if (r >= q_valid) continue;
        bf16* o = dq + ((b * T + q0 + r) * H + h) * D;
#pragma unroll
        for (int c = 0; c < C; ++c)
            if (dim_ok<D>(lane, c)) st(o + lane + 32 * c, acc[i][c]);
    }
}

// Block (key tile, b·KV + g): dV_j = Σ_i P_ij dO_i and dK_j = scale Σ_i dS_ij q_i over the query
// heads of group g and the query rows i >= j0. Warp w owns keys w·4 .. w·4+3, lane the dims lane + 32c.
template <int D>
__global__ void __launch_bounds__(kKvWarps * 32)
    attention_backward_dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                                   const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                                   const float* __restrict__ lse, const float* __restrict__ dvec, int64_t T, int64_t H,
                                   int64_t KV, float scale) {
    constexpr int S = D + 2, C = (D + 31) / 32, RW = kTile / kKvWarps;  // query rows per warp in the score phase
    __shared__ __align__(16) bf16 sQ[kTile * S], sG[kTile * S], sK[kTile * S], sV[kTile * S];
    __shared__ float sP[kTile][kTile + 1], sDS[kTile][kTile + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t tiles = (T + kTile - 1) / kTile, bg = int64_t(blockIdx.x) / tiles, b = bg / KV, g = bg % KV,
                  group = H / KV;
    const int64_t j0 = int64_t(blockIdx.x) % tiles * kTile;
    const int k_valid = tile_valid(T, j0);
    load_tile<D>(sK, k + ((b * T + j0) * KV + g) * D, KV * D, k_valid);
    load_tile<D>(sV, v + ((b * T + j0) * KV + g) * D, KV * D, k_valid);
    float adk[kKeysPerWarp][C], adv[kKeysPerWarp][C];
#pragma unroll
    for (int jj = 0; jj < kKeysPerWarp; ++jj)
#pragma unroll
        for (int c = 0; c < C; ++c) adk[jj][c] = adv[jj][c] = 0.0f;

    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (int64_t i0 = j0; i0 < T; i0 += kTile) {  // query tiles at or after the key tile (causal)
            const int q_valid = tile_valid(T, i0);
            __syncthreads();
            load_tile<D>(sQ, q + ((b * T + i0) * H + h) * D, H * D, q_valid);
            load_tile<D>(sG, dout + ((b * T + i0) * H + h) * D, H * D, q_valid);
            __syncthreads();
            // Scores: warp w rows w·RW .. w·RW+RW-1, lane = key.
#pragma unroll
            for (int rr = 0; rr < RW; ++rr) {
                const int r = warp * RW + rr;
                const int64_t t = i0 + r, j = j0 + lane;
                float p = 0.0f, ds = 0.0f;
                if (r < q_valid && lane < k_valid && j <= t) {
                    const int64_t row = (b * H + h) * T + t;
                    p = expf(dot_rows<D>(sQ + r * S, sK + lane * S) * scale - lse[row]);
                    const float dp = dot_rows<D>(sG + r * S, sV + lane * S);
                    ds = t == 0 ? 0.0f : p * (dp - dvec[row]) * scale;  // row 0 sees one key: dS = 0
                }
                sP[r][lane] = p;
                sDS[r][lane] = ds;
            }
            __syncthreads();
            for (int i = 0; i < q_valid; ++i) {
#pragma unroll
                for (int jj = 0; jj < kKeysPerWarp; ++jj) {
                    const int key = warp * kKeysPerWarp + jj;
                    const float p = sP[i][key], ds = sDS[i][key];
#pragma unroll
                    for (int c = 0; c < C; ++c) {
                        if (!dim_ok<D>(lane, c)) continue;
                        adv[jj][c] += p * ld(sG[i * S + lane + 32 * c]);
                        adk[jj][c] += ds * ld(sQ[i * S + lane + 32 * c]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int jj = 0; jj < kKeysPerWarp; ++jj) {
        const int key = warp * kKeysPerWarp + jj;
        if (key >= k_valid) continue;
        const int64_t row = ((b * T + j0 + key) * KV + g) * D;
#pragma unroll
        for (int c = 0; c < C; ++c) {
            if (!dim_ok<D>(lane, c)) continue;
            st(dk + row + lane + 32 * c, adk[jj][c]);
            st(dv + row + lane + 32 * c, adv[jj][c]);
        }
    }
}

// Blocks of a flat grid over `rows` (b·H + h, or b·KV + g) x `tiles` (tiles fastest): grid.x
// takes up to 2^31 - 1, so the fallback covers shapes past the tensor-core kernels' limits.
unsigned flat_grid(int64_t tiles, int64_t rows) {
    const int64_t blocks = tiles * rows;
    if (blocks > int64_t(0x7fffffff))
        throw_op_error("attention (CUDA cores)", "query tiles x heads exceed one grid's 2^31 - 1 blocks");
    return unsigned(blocks);
}

template <int D>
void attention_backward_launch(dim3 grid_kv, dim3 grid_q, bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q,
                               const bf16* k, const bf16* v, const float* lse, const float* dvec, int64_t T, int64_t H,
                               int64_t KV, float scale, cudaStream_t stream) {
    attention_backward_dkdv_kernel<D>
        <<<grid_kv, kKvWarps * 32, 0, stream>>>(dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale);
    cuda_check_kernel("attention_backward_dkdv_kernel");
    attention_backward_dq_kernel<D>
        <<<grid_q, kFwdWarps * 32, 0, stream>>>(dq, dout, q, k, v, lse, dvec, T, H, KV, scale);
}

}  // namespace

void attention_forward_simt(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, const AttentionShape& s,
                            cudaStream_t stream) {
    const int64_t B = s.batch, T = s.seq_len, Tk = s.keys(), H = s.n_heads, KV = s.n_kv_heads;
    const float scale = 1.0f / std::sqrt(float(s.head_dim));
    const dim3 grid(flat_grid((T + kTile - 1) / kTile, B * H));
    switch (s.head_dim) {
        case 16:
            attention_forward_kernel<16><<<grid, kFwdWarps * 32, 0, stream>>>(out, lse, q, k, v, T, Tk, H, KV, scale);
            break;
        case 32:
            attention_forward_kernel<32><<<grid, kFwdWarps * 32, 0, stream>>>(out, lse, q, k, v, T, Tk, H, KV, scale);
            break;
        case 64:
            attention_forward_kernel<64><<<grid, kFwdWarps * 32, 0, stream>>>(out, lse, q, k, v, T, Tk, H, KV, scale);
            break;
        default:
            attention_forward_kernel<128><<<grid, kFwdWarps * 32, 0, stream>>>(out, lse, q, k, v, T, Tk, H, KV, scale);
    }
    cuda_check_kernel("attention_forward_kernel");
}

void attention_backward_simt(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                             const bf16* v, const float* lse, const float* dvec, const AttentionShape& s,
                             cudaStream_t stream) {
    const int64_t B = s.batch, T = s.seq_len, H = s.n_heads, KV = s.n_kv_heads, D = s.head_dim;
    const float scale = 1.0f / std::sqrt(float(D));
    const int64_t tiles = (T + kTile - 1) / kTile;
    const dim3 grid_kv(flat_grid(tiles, B * KV)), grid_q(flat_grid(tiles, B * H));
    switch (D) {
        case 16:
            attention_backward_launch<16>(grid_kv, grid_q, dq, dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale,
                                          stream);
            break;
        case 32:
            attention_backward_launch<32>(grid_kv, grid_q, dq, dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale,
                                          stream);
            break;
        case 64:
            attention_backward_launch<64>(grid_kv, grid_q, dq, dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale,
                                          stream);
            break;
        default:
            attention_backward_launch<128>(grid_kv, grid_q, dq, dk, dv, dout, q, k, v, lse, dvec, T, H, KV, scale,
                                           stream);
    }
    cuda_check_kernel("attention_backward_dq_kernel");
}

}  // namespace skew::cuda
