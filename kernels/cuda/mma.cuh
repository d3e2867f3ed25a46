// Warp-level tensor-core building blocks (sm_80 and later, used on sm_90a) in inline PTX:
// mma.sync m16n8k16 bf16 x bf16 -> fp32, ldmatrix (plain and transposed) from shared memory,
// cp.async 16-byte global-to-shared copies with zero fill, and bf16x2 packing. Fragment layouts
// are the PTX ISA's ("Matrix fragments for mma.m16n8k16"): with g = lane / 4 and c = lane % 4,
//   A (16x16, row-major): a0a1 = (g, 2c..2c+1), a2a3 = (g+8, 2c..), a4a5 = (g, 8+2c..), a6a7 = (g+8, 8+2c..)
//   B (16x8, "col"):      b0b1 = (k 2c..2c+1, n g),  b2b3 = (k 8+2c.., n g)
//   C (16x8 fp32):        c0c1 = (g, 2c..2c+1),      c2c3 = (g+8, 2c..)
// so the C fragments of two adjacent n8 tiles are, once packed to bf16, the A fragment of a
// 16-wide k step (FlashAttention-2's register reuse of P: Dao 2023). Included by .cu files only.
// Guarded by a macro (not #pragma once) so that tests/kernels/warp_emulator.h can stand in for it.
#ifndef SKEW_CUDA_MMA_CUH
#define SKEW_CUDA_MMA_CUH
#include <cuda_runtime.h>

#include <cstdint>

namespace skew::cuda {

/// The shared-memory address (state space .shared) of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Copy 16 bytes global -> shared asynchronously (L2 only); with full false the 16 bytes are
/// zero-filled and src is not read (it must still be a valid address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool full) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(full ? 16 : 0));
}

/// Close the group of cp.async issued so far by this thread.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Wait until at most N groups of this thread's cp.async are pending (then __syncthreads to see
/// the other threads' copies).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses (16-byte aligned) of matrix i;
/// r[i] holds, per lane, row lane/4, columns 2(lane%4) and 2(lane%4)+1 of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/// As ldmatrix_x4, transposed: r[i] holds rows 2(lane%4) and 2(lane%4)+1, column lane/4 of matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/// c += a·b on tensor cores: a (16x16 bf16, row), b (16x8 bf16, col), c (16x8 fp32).
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two fp32 rounded to bf16 (nearest even) in one register: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

}  // namespace skew::cuda

#endif  // SKEW_CUDA_MMA_CUH
