// CUDA elementwise ops and the global grad-norm's sum of squares (docs/design.md, "Training protocol").
// CPU twin: kernels/cpu/elementwise.cpp. Grid-stride loops with 64-bit indices; fp32 math with one
// rounding per stored element, so bf16 results match the CPU bit for bit.
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kSumSquaresChunk = cuda_ws::SUM_SQUARES_CHUNK;  // elements per block of the grad-norm
constexpr int kFinalThreads = 1024;

template <class TD, class TS>
__global__ void accumulate_kernel(TD* __restrict__ dst, const TS* __restrict__ src, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) st(dst + i, ld(dst[i]) + ld(src[i]));
}

__global__ void residual_kernel(bf16* out, const bf16* a, const bf16* b, int64_t n) {
    // out may alias a or b: no __restrict__.
    for (int64_t i = thread_index(); i < n; i += grid_stride()) st(out + i, ld(a[i]) + ld(b[i]));
}

template <class T>
__global__ void scale_kernel(T* __restrict__ x, float factor, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) st(x + i, ld(x[i]) * factor);
}

template <class TD, class TS>
__global__ void convert_kernel(TD* __restrict__ dst, const TS* __restrict__ src, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) st(dst + i, ld(src[i]));
}

/// One buffer of the grad-norm: its data, dtype (0 bf16, 1 fp32), size and first block.
struct SumSqDesc {
    const void* data;
    int64_t numel;
    int64_t first_block;
    int32_t is_f32;
    int32_t pad;
};
static_assert(sizeof(SumSqDesc) == cuda_ws::SUM_SQUARES_DESC_BYTES,
              "kernels/cuda/workspace_sizes.h sizes the descriptors");

// Block b finds its buffer by binary search over first_block, sums the squares of its chunk in
// double and writes partials[b].
__global__ void sum_squares_blocks_kernel(double* __restrict__ partials, const SumSqDesc* __restrict__ descs,
                                          int n_descs) {
    __shared__ double smem[32];
    const int64_t b = blockIdx.x;
    int lo = 0, hi = n_descs - 1;
    while (lo < hi) {  // last desc with first_block <= b
        const int mid = (lo + hi + 1) / 2;
        if (descs[mid].first_block <= b) lo = mid;
        else hi = mid - 1;
    }
    const SumSqDesc d = descs[lo];
    const int64_t begin = (b - d.first_block) * kSumSquaresChunk;
    const int64_t end = min(d.numel, begin + kSumSquaresChunk);
    double acc = 0.0;
    if (d.is_f32) {
        const float* p = static_cast<const float*>(d.data);
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float v = p[i];
            acc += double(v) * double(v);
        }
    } else {
        const bf16* p = static_cast<const bf16*>(d.data);
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float v = ld(p[i]);
            acc += double(v) * double(v);
        }
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) partials[b] = acc;
}

__global__ void sum_partials_kernel(double* __restrict__ out, const double* __restrict__ partials, int64_t n) {
    __shared__ double smem[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) *out = acc;
}

constexpr int kDotThreads = 512;

// One block: thread t sums the products of elements i = t, t + kDotThreads, ... of the rows x cols
// sub-matrix (element i at row i / cols, column i % cols) in double, then block_sum's fixed tree;
// thread 0 adds alpha times the total to *out (in fp32, once).
__global__ void dot_accumulate_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                                      int64_t rows, int64_t cols, int64_t ld, float alpha) {
    __shared__ double smem[32];
    double acc = 0.0;
    const int64_t n = rows * cols;
    for (int64_t i = threadIdx.x; i < n; i += kDotThreads) {
        const int64_t at = i / cols * ld + i % cols;
        acc += double(a[at]) * double(b[at]);
    }
    acc = block_sum(acc, smem);
    if (threadIdx.x == 0) *out = float(double(*out) + double(alpha) * acc);
}

int64_t count_blocks(std::span<const BufferRef> buffers) {
    int64_t blocks = 0;
    for (const BufferRef& b : buffers) blocks += (b.numel + kSumSquaresChunk - 1) / kSumSquaresChunk;
    return blocks;
}

using cuda_ws::align16;

}  // namespace

// ---- launchers

void residual_forward(bf16* out, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
    check_nonneg("residual_forward n", n);
    if (n == 0) return;
    residual_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, a, b, n);
    cuda_check_kernel("residual_kernel");
}

void dot_accumulate(float* out, const float* a, const float* b, int64_t rows, int64_t cols, int64_t ld, float alpha,
                    cudaStream_t stream) {
    check_nonneg("dot_accumulate rows", rows);
    check_nonneg("dot_accumulate cols", cols);
    if (ld < cols) throw_op_error("dot_accumulate", "the leading dimension is smaller than cols");
    if (rows == 0 || cols == 0) return;
    dot_accumulate_kernel<<<1, kDotThreads, 0, stream>>>(out, a, b, rows, cols, ld, alpha);
    cuda_check_kernel("dot_accumulate_kernel");
}

void accumulate(TensorRef dst, ConstTensorRef src, int64_t n, cudaStream_t stream) {
    check_nonneg("accumulate n", n);
    if (n == 0) return;
    const unsigned g = grid_for(n, kThreads);
    const bool d32 = dst.type == ScalarType::F32, s32 = src.type == ScalarType::F32;
    if (d32 && s32)
        accumulate_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(dst.data),
                                                      static_cast<const float*>(src.data), n);
    else if (d32)
        accumulate_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(dst.data), static_cast<const bf16*>(src.data),
                                                      n);
    else if (s32)
        accumulate_kernel<<<g, kThreads, 0, stream>>>(static_cast<bf16*>(dst.data), static_cast<const float*>(src.data),
                                                      n);
    else
        accumulate_kernel<<<g, kThreads, 0, stream>>>(static_cast<bf16*>(dst.data), static_cast<const bf16*>(src.data),
                                                      n);
    cuda_check_kernel("accumulate_kernel");
}

void scale(TensorRef x, float factor, int64_t n, cudaStream_t stream) {
    check_nonneg("scale n", n);
    if (n == 0) return;
    const unsigned g = grid_for(n, kThreads);
    if (x.type == ScalarType::F32) scale_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(x.data), factor, n);
    else scale_kernel<<<g, kThreads, 0, stream>>>(static_cast<bf16*>(x.data), factor, n);
    cuda_check_kernel("scale_kernel");
}

void zero(TensorRef x, int64_t n, cudaStream_t stream) {
    check_nonneg("zero n", n);
    if (n == 0) return;
    cuda_check(cudaMemsetAsync(x.data, 0, size_t(n * scalar_type_bytes(x.type)), stream));
}

void convert(TensorRef dst, ConstTensorRef src, int64_t n, cudaStream_t stream) {
    check_nonneg("convert n", n);
    if (n == 0) return;
    const unsigned g = grid_for(n, kThreads);
    const bool d32 = dst.type == ScalarType::F32, s32 = src.type == ScalarType::F32;
    if (d32 == s32) {
        cuda_check(cudaMemcpyAsync(dst.data, src.data, size_t(n * scalar_type_bytes(dst.type)),
                                   cudaMemcpyDeviceToDevice, stream));
        return;
    }
    if (d32)
        convert_kernel<<<g, kThreads, 0, stream>>>(static_cast<float*>(dst.data), static_cast<const bf16*>(src.data),
                                                   n);
    else
        convert_kernel<<<g, kThreads, 0, stream>>>(static_cast<bf16*>(dst.data), static_cast<const float*>(src.data),
                                                   n);
    cuda_check_kernel("convert_kernel");
}

int64_t sum_squares_scratch_bytes(std::span<const BufferRef> buffers) {
    return cuda_ws::sum_squares_scratch_bytes(int64_t(buffers.size()), count_blocks(buffers));
}

double sum_squares(std::span<const BufferRef> buffers, void* scratch, cudaStream_t stream) {
    std::vector<SumSqDesc> descs;
    int64_t blocks = 0;
    for (const BufferRef& b : buffers) {
        check_nonneg("sum_squares numel", b.numel);
        if (b.numel == 0) continue;
        descs.push_back(SumSqDesc{b.data.data, b.numel, blocks, b.data.type == ScalarType::F32 ? 1 : 0, 0});
        blocks += (b.numel + kSumSquaresChunk - 1) / kSumSquaresChunk;
    }
    if (blocks == 0) return 0.0;
    if (blocks > int64_t(0x7fffffff)) throw_op_error("sum_squares", "too many elements for one grid");
    char* base = static_cast<char*>(scratch);
    auto* d_descs = reinterpret_cast<SumSqDesc*>(base);
    auto* partials = reinterpret_cast<double*>(base + align16(int64_t(buffers.size()) * int64_t(sizeof(SumSqDesc))));
    double* d_total = partials + blocks;
    // Pageable source: the call returns once the host vector has been staged, so it may go out of scope.
    cuda_check(
        cudaMemcpyAsync(d_descs, descs.data(), descs.size() * sizeof(SumSqDesc), cudaMemcpyHostToDevice, stream));
    sum_squares_blocks_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(partials, d_descs, int(descs.size()));
    cuda_check_kernel("sum_squares_blocks_kernel");
    sum_partials_kernel<<<1, kFinalThreads, 0, stream>>>(d_total, partials, blocks);
    cuda_check_kernel("sum_partials_kernel");
    double total = 0.0;
    cuda_check(cudaMemcpyAsync(&total, d_total, sizeof(double), cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
    return total;
}

}  // namespace skew::cuda
