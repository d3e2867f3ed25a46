// The device pointer arrays of the cuBLAS grouped expert GEMM (moe_matmul.h), written from the
// device offsets so the pointers never travel from the host. One thread walks the experts (E is
// at most a few thousand; this is microseconds next to the products).
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_matmul.h"

namespace skew::cuda {

namespace {

__device__ const void* operand_ptr(const GroupedOperand& o, const int64_t* off, int64_t e) {
    const int64_t idx = o.per_expert ? e * o.stride_elems : off[e] * o.stride_elems;
    return static_cast<const char*>(o.base) + idx * o.elem_bytes;
}

__global__ void grouped_pointers_kernel(void** ptrs, const int64_t* __restrict__ off, int64_t E, GroupedOperand a,
                                        GroupedOperand b, GroupedOperand c) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    int64_t g = 0;
    for (int64_t e = 0; e < E; ++e) {
        if (off[e + 1] <= off[e]) continue;  // empty expert: no group (matches the host's list)
        ptrs[g] = const_cast<void*>(operand_ptr(a, off, e));
        ptrs[E + g] = const_cast<void*>(operand_ptr(b, off, e));
        ptrs[2 * E + g] = const_cast<void*>(operand_ptr(c, off, e));
        ++g;
    }
}

}  // namespace

void grouped_pointers(void** ptrs, const int64_t* offsets, int64_t n_experts, GroupedOperand a, GroupedOperand b,
                      GroupedOperand c, cudaStream_t stream) {
    if (n_experts <= 0) return;
    grouped_pointers_kernel<<<1, 32, 0, stream>>>(ptrs, offsets, n_experts, a, b, c);
    cuda_check_kernel("grouped_pointers_kernel");
}

}  // namespace skew::cuda
