// A host emulation of the CUDA thread model for testing warp-level tensor-core kernels without a
// GPU: one std::thread per CUDA thread, blocks one after another, __syncthreads and __syncwarp as
// barriers, and the warp-collective operations of kernels/cuda/mma.cuh (ldmatrix, mma.sync
// m16n8k16 bf16, shuffles) exchanged through per-warp scratch. The fragment layouts are those the
// PTX ISA specifies ("Warp-level matrix fragments for mma.m16n8k16", "ldmatrix"), written here
// from the specification independently of how the kernels use them. cp.async copies happen as
// late as cp.async.wait_group allows; shared memory starts filled with NaN patterns, so a read of
// an element not yet (or never) written shows.
// Include this before the kernel header (it stands in for kernels/cuda/mma.cuh). Test code only.
#pragma once
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/common/bf16.h"

#define SKEW_CUDA_MMA_CUH  // kernels/cuda/mma.cuh is replaced by the definitions below
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __align__(n)
#define __launch_bounds__(...)

struct EmuDim3 {
    unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
    uint32_t x, y, z, w;
};
inline thread_local EmuDim3 threadIdx, blockIdx, gridDim, blockDim;

namespace skew::emu {

constexpr int kMaxThreads = 256;
constexpr size_t kSmemBytes = 232448;  // sm_90's largest dynamic shared memory per block

struct WarpScratch {
    uint32_t addr[32];
    uint32_t a[32][4], b[32][2];
    float c[32][4], f[32];
};

struct BlockState {
    std::unique_ptr<std::barrier<>> block;
    std::vector<std::unique_ptr<std::barrier<>>> warp;
    std::vector<WarpScratch> scratch;
};

inline BlockState*& block_state() {
    static BlockState* s = nullptr;
    return s;
}

/// The emulated shared memory (kSmemBytes, 16-byte aligned): the test points it at the array the
/// kernels declare `extern __shared__` (which it defines in the kernels' namespace).
inline unsigned char* smem = nullptr;

inline int lane_id() { return int(threadIdx.x) & 31; }
inline int warp_id() { return int(threadIdx.x) >> 5; }
inline void warp_sync() { block_state()->warp[size_t(warp_id())]->arrive_and_wait(); }
inline WarpScratch& scratch() { return block_state()->scratch[size_t(warp_id())]; }

inline float bf(uint16_t bits) { return bf16_to_f32(bf16{bits}); }
inline uint16_t lo16(uint32_t r) { return uint16_t(r & 0xffffu); }
inline uint16_t hi16(uint32_t r) { return uint16_t(r >> 16); }
inline uint16_t smem_b16(uint32_t byte_offset) {
    if (byte_offset + 2 > kSmemBytes) throw std::runtime_error("emulated ldmatrix: address past shared memory");
    uint16_t v;
    std::memcpy(&v, smem + byte_offset, 2);
    return v;
}

// Queued cp.async copies of this thread (see cp_async_16).
struct Copy {
    uint32_t dst;
    const void* src;
    bool full;
};
inline thread_local std::vector<Copy> open_group;
inline thread_local std::vector<std::vector<Copy>> committed;
inline void perform_copy(const Copy& c) {
    if (c.full) std::memcpy(emu::smem + c.dst, c.src, 16);
    else std::memset(emu::smem + c.dst, 0, 16);
}

/// Run kernel(args...) over grid (gx, gy) with `threads` threads per block.
template <class F>
void launch(unsigned gx, unsigned gy, unsigned threads, F&& kernel) {
    if (threads > kMaxThreads || threads % 32 != 0) throw std::runtime_error("emulated launch: bad block size");
    for (unsigned by = 0; by < gy; ++by)
        for (unsigned bx = 0; bx < gx; ++bx) {
            BlockState st;
            st.block = std::make_unique<std::barrier<>>(threads);
            for (unsigned w = 0; w < threads / 32; ++w) st.warp.push_back(std::make_unique<std::barrier<>>(32));
            st.scratch.resize(threads / 32);
            block_state() = &st;
            std::memset(smem, 0xff, kSmemBytes);  // NaN bf16 and fp32 patterns
            std::vector<std::thread> pool;
            for (unsigned t = 0; t < threads; ++t)
                pool.emplace_back([&, t] {
                    threadIdx = {t, 0, 0};
                    blockIdx = {bx, by, 0};
                    gridDim = {gx, gy, 1};
                    blockDim = {threads, 1, 1};
                    kernel();
                    if (!committed.empty() || !open_group.empty())
                        throw std::runtime_error("emulated kernel ended with cp.async copies never waited for");
                });
            for (auto& th : pool) th.join();
            block_state() = nullptr;
        }
}

}  // namespace skew::emu

inline void __syncthreads() { skew::emu::block_state()->block->arrive_and_wait(); }
inline void __syncwarp() { skew::emu::warp_sync(); }
inline float __shfl_xor_sync(unsigned, float v, int mask) {
    auto& s = skew::emu::scratch();
    const int lane = skew::emu::lane_id();
    s.f[lane] = v;
    skew::emu::warp_sync();
    const float r = s.f[lane ^ mask];
    skew::emu::warp_sync();
    return r;
}

namespace skew::cuda {

inline int min(int a, int b) { return a < b ? a : b; }

inline uint32_t smem_u32(const void* p) {
    const auto* c = static_cast<const unsigned char*>(p);
    if (c < emu::smem || c >= emu::smem + emu::kSmemBytes) throw std::runtime_error("smem_u32: not a shared address");
    return uint32_t(c - emu::smem);
}

// cp.async: each thread's copies are queued in groups and carried out as late as the PTX allows,
// when a cp.async.wait_group leaves at most N groups pending: a read of a tile before the wait
// that covers it sees the buffer's previous contents (or the NaN poison) and fails the test.

inline void cp_async_16(uint32_t dst, const void* src, bool full) {
    if (dst % 16 != 0 || dst + 16 > emu::kSmemBytes) throw std::runtime_error("emulated cp.async: bad destination");
    if (reinterpret_cast<uintptr_t>(src) % 16 != 0) throw std::runtime_error("emulated cp.async: unaligned source");
    emu::open_group.push_back({dst, src, full});
}
inline void cp_async_commit() {
    emu::committed.push_back(std::move(emu::open_group));
    emu::open_group.clear();
}
template <int N>
inline void cp_async_wait() {
    auto& groups = emu::committed;
    while (groups.size() > size_t(N)) {
        for (const auto& c : groups.front()) emu::perform_copy(c);
        groups.erase(groups.begin());
    }
}

// ldmatrix: lanes 8i..8i+7 give the rows of matrix i; without .trans lane l receives row l/4,
// columns 2(l%4), 2(l%4)+1; with .trans, rows 2(l%4), 2(l%4)+1 of column l/4.
inline void ldmatrix_impl(uint32_t (&r)[4], uint32_t addr, bool trans) {
    auto& s = emu::scratch();
    const int lane = emu::lane_id();
    if (addr % 16 != 0) throw std::runtime_error("emulated ldmatrix: row address not 16-byte aligned");
    s.addr[lane] = addr;
    emu::warp_sync();
    for (int i = 0; i < 4; ++i) {
        uint16_t e0, e1;
        if (!trans) {
            const uint32_t row = s.addr[8 * i + lane / 4];
            e0 = emu::smem_b16(row + 2 * (2 * (lane % 4)));
            e1 = emu::smem_b16(row + 2 * (2 * (lane % 4) + 1));
        } else {
            e0 = emu::smem_b16(s.addr[8 * i + 2 * (lane % 4)] + 2 * (lane / 4));
            e1 = emu::smem_b16(s.addr[8 * i + 2 * (lane % 4) + 1] + 2 * (lane / 4));
        }
        r[i] = uint32_t(e0) | (uint32_t(e1) << 16);
    }
    emu::warp_sync();
}
inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) { ldmatrix_impl(r, addr, false); }
inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) { ldmatrix_impl(r, addr, true); }

// mma.m16n8k16 .row.col bf16: with g = lane/4, c = lane%4,
// A: a0a1 (g, 2c..), a2a3 (g+8, 2c..), a4a5 (g, 2c+8..), a6a7 (g+8, 2c+8..)
// B: b0b1 (k 2c.., n g), b2b3 (k 2c+8.., n g); C/D: (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1).
inline void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    auto& s = emu::scratch();
    const int lane = emu::lane_id();
    for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i];
    s.b[lane][0] = b0;
    s.b[lane][1] = b1;
    emu::warp_sync();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, q = l % 4;
        const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * q, 2 * q, 2 * q + 8, 2 * q + 8};
        for (int i = 0; i < 4; ++i) {
            A[rows[i]][cols[i]] = emu::bf(emu::lo16(s.a[l][i]));
            A[rows[i]][cols[i] + 1] = emu::bf(emu::hi16(s.a[l][i]));
        }
        B[2 * q][g] = emu::bf(emu::lo16(s.b[l][0]));
        B[2 * q + 1][g] = emu::bf(emu::hi16(s.b[l][0]));
        B[2 * q + 8][g] = emu::bf(emu::lo16(s.b[l][1]));
        B[2 * q + 9][g] = emu::bf(emu::hi16(s.b[l][1]));
    }
    emu::warp_sync();
    const int g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * q + (i & 1);
        double acc = c[i];
        for (int k = 0; k < 16; ++k) acc += double(A[row][k]) * double(B[k][col]);
        c[i] = float(acc);
    }
}

inline uint32_t pack_bf16x2(float lo, float hi) {
    return uint32_t(f32_to_bf16(lo).bits) | (uint32_t(f32_to_bf16(hi).bits) << 16);
}

}  // namespace skew::cuda
