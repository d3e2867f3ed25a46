// CUDA rotary position embedding (kernels/common/rope_math.h): a grid-stride loop over the lane
// pairs of every (token, head) row, in place. CPU twin: kernels/cpu/rope.cpp.
#include "kernels/common/rope_math.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rope.h"

namespace skew::cuda {

namespace {

__global__ void rope_kernel(bf16* __restrict__ x, int64_t rows, int64_t seq_len, int64_t n_heads, int64_t head_dim,
                            int64_t pos0, float theta, float sign) {
    const int64_t half = head_dim / 2, pairs = rows * half;
    // the grid is capped (grid_for): pairs past 2^28 are reached by the loop, not by more blocks
    for (int64_t j = thread_index(); j < pairs; j += grid_stride()) {
        const int64_t r = j / half, i = j % half;
        const int64_t t = (r / n_heads) % seq_len;
        float s, c;
        sincosf(rope_angle(pos0 + t, i, head_dim, theta), &s, &c);
        bf16* v = x + r * head_dim;
        float lo = ld(v[i]), hi = ld(v[i + half]);
        rope_rotate(lo, hi, c, s, sign);
        st(v + i, lo);
        st(v + i + half, hi);
    }
}

}  // namespace

void rope(bf16* x, int64_t batch, int64_t seq_len, int64_t n_heads, int64_t head_dim, int64_t pos0, float theta,
          bool inverse, cudaStream_t stream) {
    check_nonneg("rope batch", batch);
    check_nonneg("rope seq_len", seq_len);
    check_nonneg("rope n_heads", n_heads);
    check_nonneg("rope pos0", pos0);
    check_nonneg("rope head_dim", head_dim);  // odd head_dim: refused by CudaBackend::rope
    const int64_t pairs = batch * seq_len * n_heads * (head_dim / 2);
    if (pairs == 0) return;
    rope_kernel<<<grid_for(pairs, 256), 256, 0, stream>>>(x, batch * seq_len * n_heads, seq_len, n_heads, head_dim,
                                                          pos0, theta, inverse ? -1.0f : 1.0f);
    cuda_check_kernel("rope_kernel");
}

}  // namespace skew::cuda
