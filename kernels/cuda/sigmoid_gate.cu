// CUDA sigmoid gate forward and backward (docs/architectures.md, "Shared experts"): each row
// scaled by its sigmoid(logit), a grid row per token row; the backward's row dot product by one warp per row, lanes
// striding the columns, then warp_sum (an order fixed by C). CPU twin: kernels/cpu/sigmoid_gate.cpp.
#include "kernels/common/activations.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sigmoid_gate.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // backward: one warp per row

// Rows blockIdx.y, blockIdx.y + gridDim.y, ...; columns strided by the grid's x extent.
__global__ void sigmoid_gate_forward_kernel(bf16* __restrict__ out, const float* __restrict__ logit,
                                            const bf16* __restrict__ s, int64_t n_rows, int64_t C, bool accumulate) {
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const float g = sigmoid_f32(logit[r]);
        for (int64_t c = thread_index(); c < C; c += grid_stride()) {
            const int64_t i = r * C + c;
            st(out + i, (accumulate ? ld(out[i]) : 0.0f) + g * ld(s[i]));
        }
    }
}

__global__ void sigmoid_gate_backward_kernel(bf16* __restrict__ ds, float* __restrict__ dlogit,
                                             const bf16* __restrict__ dout, const float* __restrict__ logit,
                                             const bf16* __restrict__ s, int64_t n_rows, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= n_rows) return;
    const float g = sigmoid_f32(logit[row]);
    const bf16* dy = dout + row * C;
    float dot = 0.0f;
    for (int64_t c = lane; c < C; c += 32) {
        const float d = ld(dy[c]);
        if (ds) st(ds + row * C + c, g * d);
        dot += d * ld(s[row * C + c]);
    }
    dot = warp_sum(dot);
    if (lane == 0 && dlogit) dlogit[row] = g * (1.0f - g) * dot;
}

}  // namespace

// ---- launchers

void sigmoid_gate_forward(bf16* out, const float* logit, const bf16* s, int64_t n_rows, int64_t channels,
                          bool accumulate, cudaStream_t stream) {
    check_nonneg("sigmoid_gate_forward n_rows", n_rows);
    check_nonneg("sigmoid_gate_forward channels", channels);
    if (n_rows == 0 || channels == 0) return;
    const dim3 grid(unsigned((channels + kThreads - 1) / kThreads), grid_y_for(n_rows));
    sigmoid_gate_forward_kernel<<<grid, kThreads, 0, stream>>>(out, logit, s, n_rows, channels, accumulate);
    cuda_check_kernel("sigmoid_gate_forward_kernel");
}

void sigmoid_gate_backward(bf16* ds, float* dlogit, const bf16* dout, const float* logit, const bf16* s, int64_t n_rows,
                           int64_t channels, cudaStream_t stream) {
    check_nonneg("sigmoid_gate_backward n_rows", n_rows);
    check_nonneg("sigmoid_gate_backward channels", channels);
    if (n_rows == 0 || (!ds && !dlogit)) return;
    const unsigned blocks = unsigned((n_rows + kRowsPerBlock - 1) / kRowsPerBlock);
    sigmoid_gate_backward_kernel<<<blocks, kThreads, 0, stream>>>(ds, dlogit, dout, logit, s, n_rows, channels);
    cuda_check_kernel("sigmoid_gate_backward_kernel");
}

}  // namespace skew::cuda
