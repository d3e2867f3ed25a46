// Causal grouped-query attention on tensor cores, FlashAttention-2's schedule (Dao 2023, "Faster
// Attention with Better Parallelism and Work Partitioning", Algorithms 1 and 2) with mma.sync
// m16n8k16 bf16 -> fp32 and ldmatrix (kernels/cuda/mma.cuh); docs/attention.md, docs/design.md.
//   forward: block (b·H + h, query tile of 64), 4 warps x 16 query rows; K/V tiles of 64 (or 32)
//     keys double-buffered through cp.async, K and V in separate groups; S = Q·K^T and O += P·V
//     in registers (P reuses S's accumulators), online softmax in fp32 with exp2, lse (natural
//     log) saved per row. With Tk keys per sequence (Tk >= T, a KV-cache step) query row t sits at
//     position Tk - T + t: the key tiles and the causal mask follow the positions.
//   backward (deterministic, no atomics): D = rowsum(dO∘O) (attention.cu), then
//     dK/dV: block (b·KV + g, key tile of 64), 4 warps x 16 keys; loops over the G query heads of
//       the group and the query steps of 32 rows at or after the tile (causal); recomputes
//       S^T = K·Q^T and dP^T = V·dO^T, P^T = exp(S^T·scale - lse), dS^T = P^T∘(dP^T - D)·scale;
//       dV += P^T·dO and dK += dS^T·Q in registers.
//     dQ: block (b·H + h, query tile of 64), 4 warps x 16 rows; recomputes S and dP per key tile,
//       dQ += dS·K.
// Query head h reads KV head h / (H / KV) by index. A query row that sees exactly one key (row 0
// of every sequence) has a constant softmax (P = 1), so its dS is exactly 0: the kernels write 0
// there instead of P·(dP - D), which would be the rounding difference of two fp32 dot products.
// Rows are stored in shared memory with 8 bf16 of padding (row stride D + 8): the 8 rows an
// ldmatrix reads lie in 8 distinct 16-byte bank groups for D = 16, 32, 64 and 128.
// Device code only (the launchers: attention_mma.cu), written so that a host build with the
// warp emulation of tests/kernels/warp_emulator.h runs it unchanged.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/bf16.h"
#include "kernels/cuda/mma.cuh"

namespace skew::cuda::attention_mma {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileM = 64;  // query rows per block (forward, dQ): 16 per warp
constexpr int kTileN =
    64;  // keys per dK/dV block (16 per warp); the forward's and dQ's default key tile (KN: 32 or 64)
constexpr int kStepM = 32;  // query rows per step of the dK/dV block
// k-loop unrolling of the dK/dV kernel's score GEMMs: 2 at D = 128 (no spills), full below.
template <int D>
constexpr int dkdv_unroll() {
    return D == 128 ? 2 : D / 16;
}
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int stride() {
    return D + 8;
}  // smem row stride in bf16

// Lane offsets (elements) for ldmatrix_x4 into a row-major smem tile of stride S:
// A operand (16 rows x 16 cols at (0, 0)): matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <int S>
__device__ __forceinline__ int a_lane_offset(int lane) {
    return (lane & 15) * S + (lane >> 4) * 8;
}
// B operand as rows of B^T (16 rows n x 16 cols k): (n 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
template <int S>
__device__ __forceinline__ int bt_lane_offset(int lane) {
    return ((lane >> 4) * 8 + (lane & 7)) * S + ((lane >> 3) & 1) * 8;
}
// B operand as rows of B (16 rows k x 16 cols n), read transposed: (k 0-7, n 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
template <int S>
__device__ __forceinline__ int b_lane_offset(int lane) {
    return (((lane >> 3) & 1) * 8 + (lane & 7)) * S + (lane >> 4) * 8;
}

// acc (16 x 8·NT fp32, C fragments) += A · B^T: A the warp's 16 rows of a smem tile (a_addr =
// lane's a_lane_offset address), B^T NT·8 rows of a smem tile (bt_addr = lane's bt_lane_offset
// address), both D wide. Only the first n_pairs pairs of n8 tiles are computed (the rest are
// fully masked by the caller). UNROLL bounds the k loop's unrolling (register pressure).
template <int D, int NT, int UNROLL = D / 16>
__device__ __forceinline__ void mma_a_bt(float (&acc)[NT][4], uint32_t a_addr, uint32_t bt_addr, int n_pairs) {
    constexpr int S = stride<D>();
#pragma unroll(UNROLL)
    for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        ldmatrix_x4(a, a_addr + kk * 32);
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            if (np < n_pairs) {
                uint32_t b[4];
                ldmatrix_x4(b, bt_addr + (np * 16 * S + kk * 16) * 2);
                mma_bf16_16816(acc[2 * np], a, b[0], b[1]);
                mma_bf16_16816(acc[2 * np + 1], a, b[2], b[3]);
            }
        }
    }
}

// acc (16 x D fp32) += P · B: P (16 x 16·KT) given as fp32 C fragments p[2·KT] (rounded to bf16
// here), B 16·KT rows of a smem tile, D wide (b_addr = lane's b_lane_offset address). Only the
// first k_steps steps of 16 are computed (P is zero beyond them).
template <int D, int KT>
__device__ __forceinline__ void mma_p_b(float (&acc)[D / 8][4], const float (&p)[2 * KT][4], uint32_t b_addr,
                                        int k_steps) {
    constexpr int S = stride<D>();
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) {
        if (kk < k_steps) {
            const uint32_t a[4] = {pack_bf16x2(p[2 * kk][0], p[2 * kk][1]), pack_bf16x2(p[2 * kk][2], p[2 * kk][3]),
                                   pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                   pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, b_addr + (kk * 16 * S + dp * 16) * 2);
                mma_bf16_16816(acc[2 * dp], a, b[0], b[1]);
                mma_bf16_16816(acc[2 * dp + 1], a, b[2], b[3]);
            }
        }
    }
}

// Copy ROWS rows of D bf16 (global row stride src_stride elements) into a smem tile of stride
// D + 8 with cp.async; rows >= valid are zero-filled (valid >= 1: src row 0 is readable).
template <int D, int ROWS>
__device__ __forceinline__ void load_rows_async(bf16* dst, const bf16* __restrict__ src, int64_t src_stride,
                                                int valid) {
    constexpr int S = stride<D>(), CH = D / 8, N = ROWS * CH;
#pragma unroll
    for (int it = 0; it < (N + kThreads - 1) / kThreads; ++it) {
        const int i = it * kThreads + int(threadIdx.x);
        if (N % kThreads == 0 || i < N) {
            const int r = i / CH, c = i - r * CH;
            const bool ok = r < valid;
            cp_async_16(smem_u32(dst + r * S + c * 8), ok ? src + r * src_stride + c * 8 : src, ok);
        }
    }
}

// Round a warp's 16 x D fp32 C fragments (rows g and g+8 scaled by mul0 and mul1) to bf16 into
// the warp's 16 smem rows at s_rows (stride D + 8).
template <int D>
__device__ __forceinline__ void stage_rows(bf16* s_rows, const float (&acc)[D / 8][4], float mul0, float mul1) {
    constexpr int S = stride<D>();
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
        *reinterpret_cast<uint32_t*>(s_rows + g * S + nt * 8 + 2 * c) =
            pack_bf16x2(acc[nt][0] * mul0, acc[nt][1] * mul0);
        *reinterpret_cast<uint32_t*>(s_rows + (g + 8) * S + nt * 8 + 2 * c) =
            pack_bf16x2(acc[nt][2] * mul1, acc[nt][3] * mul1);
    }
}

// Copy a warp's 16 staged smem rows to global rows dst + r·dst_stride (16-byte stores), r < valid.
template <int D>
__device__ __forceinline__ void store_rows(bf16* __restrict__ dst, int64_t dst_stride, const bf16* s_rows, int valid) {
    constexpr int S = stride<D>(), CH = D / 8;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = lane; i < 16 * CH; i += 32) {
        const int r = i / CH, c = i - r * CH;
        if (r < valid)
            *reinterpret_cast<uint4*>(dst + r * dst_stride + c * 8) =
                *reinterpret_cast<const uint4*>(s_rows + r * S + c * 8);
    }
}

// Max and sum over the 4 lanes of a quad (the lanes holding one row of a C fragment).
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- forward

template <int D, int KN = kTileN>
__global__ void __launch_bounds__(kThreads, KN == 32 ? 3 : 2)
    attention_forward_mma_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                                 const bf16* __restrict__ k, const bf16* __restrict__ v, int T, int Tk, int H, int KV,
                                 float scale, float scale_log2) {
    constexpr int S = stride<D>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
    bf16* sK = sQ + kTileM * S;  // two buffers of KN rows
    bf16* sV = sK + 2 * KN * S;  // two buffers of KN rows
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, g = h / (H / KV);
    const int qt = int(gridDim.y) - 1 - int(blockIdx.y);  // longest rows first
    const int q0 = qt * kTileM, off = Tk - T;             // off: the position of query row 0
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const bf16* k_base = k + (b * Tk * KV + g) * D;
    const bf16* v_base = v + (b * Tk * KV + g) * D;

    // Pipeline (FlashAttention-2's): K and V travel in separate cp.async groups, so S = Q·K_j^T
    // starts before V_j lands and K_{j+1} loads during P·V_j. Groups in issue order: {Q, K_0},
    // {V_0}, {K_1}, {V_1}, ...
    load_rows_async<D, kTileM>(sQ, q + ((b * T + q0) * H + h) * D, q_stride, min(kTileM, T - q0));
    load_rows_async<D, KN>(sK, k_base, kv_stride, min(KN, Tk));
    cp_async_commit();
    load_rows_async<D, KN>(sV, v_base, kv_stride, min(KN, Tk));
    cp_async_commit();

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int row0 = q0 + warp * 16 + (lane >> 2);  // rows row0 and row0 + 8
    const uint32_t q_addr = smem_u32(sQ + warp * 16 * S + a_lane_offset<S>(lane));
    const int n_tiles = min((off + q0 + kTileM - 1) / KN + 1, (Tk + KN - 1) / KN);  // key tiles up to the diagonal
    const int warp_row = off + q0 + warp * 16;  // the position of the warp's first row
    for (int j = 0; j < n_tiles; ++j) {
        const int buf = j & 1;
        cp_async_wait<1>();  // K_j (and Q) have landed; V_j may be in flight
        __syncthreads();     // ... for every thread; and every warp is done with iteration j - 1
        const bf16* cK = sK + buf * KN * S;
        const bf16* cV = sV + buf * KN * S;
        // Keys past the warp's last row are masked: only the first `pairs` 16-key groups are computed
        // (none when the whole tile lies past the warp's rows), and keys past a row are masked
        // where the tile reaches past the warp's first row.
        const int key_lo = j * KN;
        const bool need_mask = key_lo + KN - 1 > warp_row;
        const int pairs = warp_row + 15 < key_lo ? 0 : min(KN / 16, (warp_row + 15 - key_lo) / 16 + 1);
        float s[KN / 8][4];  // S, then P
#pragma unroll
        for (int i = 0; i < KN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        if (pairs > 0) {
            mma_a_bt<D, KN / 8>(s, q_addr, smem_u32(cK + bt_lane_offset<S>(lane)), pairs);
            if (need_mask) {
#pragma unroll
                for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int key = key_lo + nt * 8 + 2 * (lane & 3) + (e & 1);
                        if (key > off + row0 + (e >> 1) * 8) s[nt][e] = -INFINITY;
                    }
            }
            // Online softmax over the rows row0 (e = 0, 1) and row0 + 8 (e = 2, 3).
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt) {
                mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
            }
            float ms[2], corr[2], rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = quad_max(mx[r]);
                ms[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * scale_log2;
                corr[r] = exp2f(m[r] * scale_log2 - ms[r]);
                m[r] = mx[r];
            }
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    s[nt][e] = exp2f(s[nt][e] * scale_log2 - ms[e >> 1]);
                    rs[e >> 1] += s[nt][e];
                }
#pragma unroll
            for (int r = 0; r < 2; ++r) l[r] = l[r] * corr[r] + rs[r];
#pragma unroll
            for (int i = 0; i < D / 8; ++i) {
                o[i][0] *= corr[0];
                o[i][1] *= corr[0];
                o[i][2] *= corr[1];
                o[i][3] *= corr[1];
            }
        }
        const int j1 = (j + 1) * KN;
        if (j + 1 < n_tiles) {  // K_{j+1} into the other buffer (last read by S of iteration j - 1)
            load_rows_async<D, KN>(sK + (buf ^ 1) * KN * S, k_base + j1 * kv_stride, kv_stride, min(KN, Tk - j1));
            cp_async_commit();
            cp_async_wait<1>();  // V_j has landed; K_{j+1} may be in flight
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (pairs > 0) mma_p_b<D, KN / 16>(o, s, smem_u32(cV + b_lane_offset<S>(lane)), pairs);
        if (j + 1 < n_tiles) {  // V_{j+1} into the other buffer (last read by P·V of iteration j - 1)
            load_rows_async<D, KN>(sV + (buf ^ 1) * KN * S, v_base + j1 * kv_stride, kv_stride, min(KN, Tk - j1));
            cp_async_commit();
        }
    }

    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] = quad_sum(l[r]);
        inv[r] = 1.0f / l[r];
    }
    if (lse && (lane & 3) == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + 8 * r;
            if (row < T) lse[bh * T + row] = m[r] * scale + logf(l[r]);
        }
    }
    bf16* s_rows = sQ + warp * 16 * S;  // the warp's own Q rows, no longer read
    stage_rows<D>(s_rows, o, inv[0], inv[1]);
    __syncwarp();
    const int r0 = q0 + warp * 16;
    if (r0 < T) store_rows<D>(out + ((b * T + r0) * H + h) * D, q_stride, s_rows, min(16, T - r0));
}

// ---- backward: dQ

template <int D, int KN = kTileN>
__global__ void __launch_bounds__(kThreads, KN == 32 ? 3 : 2)
    attention_backward_dq_mma_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                                     const bf16* __restrict__ k, const bf16* __restrict__ v,
                                     const float* __restrict__ lse, const float* __restrict__ dvec, int T, int H,
                                     int KV, float scale, float scale_log2) {
    constexpr int S = stride<D>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
    bf16* sG = sQ + kTileM * S;
    bf16* sK = sG + kTileM * S;  // two buffers
    bf16* sV = sK + 2 * KN * S;  // two buffers
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t bh = blockIdx.x, b = bh / H, h = bh % H, g = h / (H / KV);
    const int qt = int(gridDim.y) - 1 - int(blockIdx.y);
    const int q0 = qt * kTileM;
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const bf16* k_base = k + (b * T * KV + g) * D;
    const bf16* v_base = v + (b * T * KV + g) * D;
    const int q_valid = min(kTileM, T - q0);

    load_rows_async<D, kTileM>(sQ, q + ((b * T + q0) * H + h) * D, q_stride, q_valid);
    load_rows_async<D, kTileM>(sG, dout + ((b * T + q0) * H + h) * D, q_stride, q_valid);
    load_rows_async<D, KN>(sK, k_base, kv_stride, min(KN, T));
    load_rows_async<D, KN>(sV, v_base, kv_stride, min(KN, T));
    cp_async_commit();

    const int row0 = q0 + warp * 16 + (lane >> 2);
    float row_lse[2], row_d[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + 8 * r;
        row_lse[r] = row < T ? lse[bh * T + row] * kLog2e : INFINITY;  // P = 0 on rows past T
        row_d[r] = row < T ? dvec[bh * T + row] : 0.0f;
    }
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    const uint32_t q_addr = smem_u32(sQ + warp * 16 * S + a_lane_offset<S>(lane));
    const uint32_t g_addr = smem_u32(sG + warp * 16 * S + a_lane_offset<S>(lane));
    const int n_tiles = min((q0 + kTileM - 1) / KN + 1, (T + KN - 1) / KN);
    const int warp_row = q0 + warp * 16;
    for (int j = 0; j < n_tiles; ++j) {
        const int buf = j & 1;
        if (j + 1 < n_tiles) {
            const int j1 = (j + 1) * KN;
            load_rows_async<D, KN>(sK + (buf ^ 1) * KN * S, k_base + j1 * kv_stride, kv_stride, min(KN, T - j1));
            load_rows_async<D, KN>(sV + (buf ^ 1) * KN * S, v_base + j1 * kv_stride, kv_stride, min(KN, T - j1));
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16* cK = sK + buf * KN * S;
        const bf16* cV = sV + buf * KN * S;
        const int key_lo = j * KN;  // as in the forward
        const bool need_mask = key_lo + KN - 1 > warp_row;
        const int pairs = warp_row + 15 < key_lo ? 0 : min(KN / 16, (warp_row + 15 - key_lo) / 16 + 1);
        if (pairs > 0) {
            float s[KN / 8][4], dp[KN / 8][4];
#pragma unroll
            for (int i = 0; i < KN / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
            mma_a_bt<D, KN / 8>(s, q_addr, smem_u32(cK + bt_lane_offset<S>(lane)), pairs);
            mma_a_bt<D, KN / 8>(dp, g_addr, smem_u32(cV + bt_lane_offset<S>(lane)), pairs);
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = key_lo + nt * 8 + 2 * (lane & 3) + (e & 1), row = row0 + (e >> 1) * 8;
                    const float p = exp2f(s[nt][e] * scale_log2 - row_lse[e >> 1]);
                    const bool zero =
                        (need_mask && key > row) || row == 0;  // masked, or a one-key row (dS = 0 exactly)
                    s[nt][e] = zero ? 0.0f : p * (dp[nt][e] - row_d[e >> 1]) * scale;
                }
            mma_p_b<D, KN / 16>(acc, s, smem_u32(cK + b_lane_offset<S>(lane)), pairs);
        }
        __syncthreads();
    }
    bf16* s_rows = sQ + warp * 16 * S;
    stage_rows<D>(s_rows, acc, 1.0f, 1.0f);
    __syncwarp();
    const int r0 = q0 + warp * 16;
    if (r0 < T) store_rows<D>(dq + ((b * T + r0) * H + h) * D, q_stride, s_rows, min(16, T - r0));
}

// ---- backward: dK, dV

template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    attention_backward_dkdv_mma_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                                       const bf16* __restrict__ q, const bf16* __restrict__ k,
                                       const bf16* __restrict__ v, const float* __restrict__ lse,
                                       const float* __restrict__ dvec, int T, int H, int KV, float scale,
                                       float scale_log2) {
    constexpr int S = stride<D>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* sK = reinterpret_cast<bf16*>(smem_raw);
    bf16* sV = sK + kTileN * S;
    bf16* sQ = sV + kTileN * S;                                 // two buffers of kStepM rows
    bf16* sG = sQ + 2 * kStepM * S;                             // two buffers of kStepM rows
    float* sL = reinterpret_cast<float*>(sG + 2 * kStepM * S);  // two buffers: lse·log2(e) per query row
    float* sD = sL + 2 * kStepM;                                // two buffers: D per query row
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t bg = blockIdx.x, b = bg / KV, g = bg % KV;
    const int G = H / KV;
    const int j0 = int(blockIdx.y) * kTileN;  // low key tiles see the most queries: scheduled first
    const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(KV) * D;
    const int k_valid = min(kTileN, T - j0);
    const int steps = (T - j0 + kStepM - 1) / kStepM;  // query steps at or after the key tile
    const int n_it = G * steps;

    load_rows_async<D, kTileN>(sK, k + ((b * T + j0) * KV + g) * D, kv_stride, k_valid);
    load_rows_async<D, kTileN>(sV, v + ((b * T + j0) * KV + g) * D, kv_stride, k_valid);
    auto load_step = [&](int it, int buf) {
        const int64_t hh = int64_t(g) * G + it / steps;
        const int i0 = j0 + (it % steps) * kStepM;
        const int valid = min(kStepM, T - i0);
        load_rows_async<D, kStepM>(sQ + buf * kStepM * S, q + ((b * T + i0) * H + hh) * D, q_stride, valid);
        load_rows_async<D, kStepM>(sG + buf * kStepM * S, dout + ((b * T + i0) * H + hh) * D, q_stride, valid);
        if (tid < kStepM) {
            const int i = i0 + tid;
            const int64_t row = (b * H + hh) * T + i;
            sL[buf * kStepM + tid] = i < T ? lse[row] * kLog2e : INFINITY;  // P = 0 on rows past T
            sD[buf * kStepM + tid] = i < T ? dvec[row] : 0.0f;
        }
    };
    load_step(0, 0);
    cp_async_commit();

    float adk[D / 8][4], adv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) adk[i][e] = adv[i][e] = 0.0f;
    const int key0 = j0 + warp * 16 + (lane >> 2);  // keys key0 (e = 0, 1) and key0 + 8 (e = 2, 3)
    const uint32_t k_addr = smem_u32(sK + warp * 16 * S + a_lane_offset<S>(lane));
    const uint32_t v_addr = smem_u32(sV + warp * 16 * S + a_lane_offset<S>(lane));
    for (int it = 0; it < n_it; ++it) {
        const int buf = it & 1;
        if (it + 1 < n_it) {
            load_step(it + 1, buf ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int i0 = j0 + (it % steps) * kStepM;
        if (j0 + warp * 16 <= i0 + kStepM - 1) {  // some of the warp's keys are visible to the step's rows
            const bf16* cQ = sQ + buf * kStepM * S;
            const bf16* cG = sG + buf * kStepM * S;
            const float* cL = sL + buf * kStepM;
            const float* cD = sD + buf * kStepM;
            // P^T first (dV += P^T·dO), then dP^T and dS^T (dK += dS^T·Q): one score tile live at a time.
            float st[kStepM / 8][4];  // 16 keys x 32 queries
#pragma unroll
            for (int i = 0; i < kStepM / 8; ++i) st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.0f;
            mma_a_bt<D, kStepM / 8, dkdv_unroll<D>()>(st, k_addr, smem_u32(cQ + bt_lane_offset<S>(lane)), kStepM / 16);
#pragma unroll
            for (int nt = 0; nt < kStepM / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int c = nt * 8 + 2 * (lane & 3) + (e & 1), key = key0 + (e >> 1) * 8;
                    st[nt][e] = key > i0 + c ? 0.0f : exp2f(st[nt][e] * scale_log2 - cL[c]);
                }
            mma_p_b<D, kStepM / 16>(adv, st, smem_u32(cG + b_lane_offset<S>(lane)), kStepM / 16);
            float dpt[kStepM / 8][4];
#pragma unroll
            for (int i = 0; i < kStepM / 8; ++i) dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
            mma_a_bt<D, kStepM / 8, dkdv_unroll<D>()>(dpt, v_addr, smem_u32(cG + bt_lane_offset<S>(lane)), kStepM / 16);
#pragma unroll
            for (int nt = 0; nt < kStepM / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int c = nt * 8 + 2 * (lane & 3) + (e & 1), row = i0 + c;
                    // st is 0 where masked; row 0 sees one key: dS = 0 exactly
                    dpt[nt][e] = row == 0 ? 0.0f : st[nt][e] * (dpt[nt][e] - cD[c]) * scale;
                }
            mma_p_b<D, kStepM / 16>(adk, dpt, smem_u32(cQ + b_lane_offset<S>(lane)), kStepM / 16);
        }
        __syncthreads();
    }
    const int r0 = j0 + warp * 16;
    if (r0 >= T) return;
    bf16* sk_rows = sK + warp * 16 * S;  // the warp's own K and V rows, no longer read
    bf16* sv_rows = sV + warp * 16 * S;
    stage_rows<D>(sk_rows, adk, 1.0f, 1.0f);
    stage_rows<D>(sv_rows, adv, 1.0f, 1.0f);
    __syncwarp();
    store_rows<D>(dk + ((b * T + r0) * KV + g) * D, kv_stride, sk_rows, min(16, T - r0));
    store_rows<D>(dv + ((b * T + r0) * KV + g) * D, kv_stride, sv_rows, min(16, T - r0));
}

}  // namespace skew::cuda::attention_mma
