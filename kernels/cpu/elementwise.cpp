// CPU elementwise ops and reductions: residual add, gradient accumulation, in-place scaling (1/accum
// steps, global grad-norm clipping), zero, dtype conversion, and the sum of squares over many
// buffers in double for the global grad-norm (docs/design.md, "Training protocol": clip at 1.0).
#include <omp.h>

#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
    check_nonneg("residual_forward n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store(out + i, load(a[i]) + load(b[i]));
}

void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) {
    check_nonneg("accumulate n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store_at(dst, i, load_at(dst, i) + load_at(src, i));
}

void scale(TensorRef x, float factor, int64_t n) {
    check_nonneg("scale n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store_at(x, i, load_at(x, i) * factor);
}

void zero(TensorRef x, int64_t n) {
    check_nonneg("zero n", n);
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store_at(x, i, 0.0f);
}

void convert(TensorRef dst, ConstTensorRef src, int64_t n) {
    check_nonneg("convert n", n);
    if (dst.type == ScalarType::F32 && src.type == ScalarType::BF16) {  // widening (the LM head's wte): a shift
        float* d = static_cast<float*>(dst.data);
        const bf16* s = static_cast<const bf16*>(src.data);
#pragma omp parallel for simd schedule(static) if (n > kParallelMinWork)
        for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
        return;
    }
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t i = 0; i < n; ++i) store_at(dst, i, load_at(src, i));
}

double sum_squares(std::span<const BufferRef> buffers) {
    // Fixed blocks summed in parallel, then the block sums in order: independent of thread count.
    const int64_t block = 1 << 16;
    double total = 0.0;
    for (const BufferRef& buf : buffers) {
        check_nonneg("sum_squares numel", buf.numel);
        const int64_t nb = (buf.numel + block - 1) / block;
        std::vector<double> part(size_t(nb), 0.0);
#pragma omp parallel for schedule(static) if (nb > 1)
        for (int64_t bi = 0; bi < nb; ++bi) {
            const int64_t i0 = bi * block, i1 = std::min(buf.numel, i0 + block);
            double acc = 0.0;
            for (int64_t i = i0; i < i1; ++i) {
                const double v = load_at(buf.data, i);
                acc += v * v;
            }
            part[size_t(bi)] = acc;
        }
        for (double p : part) total += p;
    }
    return total;
}

template void residual_forward<bf16>(bf16*, const bf16*, const bf16*, int64_t);
template void residual_forward<float>(float*, const float*, const float*, int64_t);

}  // namespace skew::cpu
