// CPU elementwise ops and reductions: residual add, gradient accumulation, in-place scaling (1/accum
// steps, global grad-norm clipping), zero, dtype conversion, and the sum of squares over many
// buffers in double for the global grad-norm (docs/design.md, "Training protocol": clip at 1.0).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops.h"

namespace skew::cpu {

namespace {

/// bf16 narrowing as f32_to_bf16 (round to nearest even, NaN kept quiet) without a branch, so
/// the loops below vectorize.
inline bf16 narrow(float v) {
    const uint32_t u = f32_bits(v);
    const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return bf16{uint16_t((u & 0x7FFFFFFFu) > 0x7F800000u ? (u >> 16) | 0x0040u : rne)};
}
inline void put(bf16* p, float v) { *p = narrow(v); }
inline void put(float* p, float v) { *p = v; }

/// One typed loop per (destination, source) element type pair, compiled per vector width.
template <class D, class S>
inline __attribute__((always_inline)) void add_into(D* dst, const S* src, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) put(dst + i, load(dst[i]) + load(src[i]));
}
template <class T>
inline __attribute__((always_inline)) void add_two(T* out, const T* a, const T* b, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) put(out + i, load(a[i]) + load(b[i]));
}
template <class T>
inline __attribute__((always_inline)) void mul_by(T* x, float f, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) put(x + i, load(x[i]) * f);
}

SKEW_CPU_CLONES void add_f32_f32(float* d, const float* s, int64_t i0, int64_t i1) { add_into(d, s, i0, i1); }
SKEW_CPU_CLONES void add_f32_bf16(float* d, const bf16* s, int64_t i0, int64_t i1) { add_into(d, s, i0, i1); }
SKEW_CPU_CLONES void add_bf16_f32(bf16* d, const float* s, int64_t i0, int64_t i1) { add_into(d, s, i0, i1); }
SKEW_CPU_CLONES void add_bf16_bf16(bf16* d, const bf16* s, int64_t i0, int64_t i1) { add_into(d, s, i0, i1); }
SKEW_CPU_CLONES void residual_bf16(bf16* o, const bf16* a, const bf16* b, int64_t i0, int64_t i1) {
    add_two(o, a, b, i0, i1);
}
SKEW_CPU_CLONES void residual_f32(float* o, const float* a, const float* b, int64_t i0, int64_t i1) {
    add_two(o, a, b, i0, i1);
}
SKEW_CPU_CLONES void narrow_f32(bf16* d, const float* s, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) d[i] = narrow(s[i]);
}
SKEW_CPU_CLONES void scale_f32(float* x, float f, int64_t i0, int64_t i1) { mul_by(x, f, i0, i1); }
SKEW_CPU_CLONES void scale_bf16(bf16* x, float f, int64_t i0, int64_t i1) { mul_by(x, f, i0, i1); }
void residual_any(bf16* o, const bf16* a, const bf16* b, int64_t i0, int64_t i1) { residual_bf16(o, a, b, i0, i1); }
void residual_any(float* o, const float* a, const float* b, int64_t i0, int64_t i1) { residual_f32(o, a, b, i0, i1); }

/// Elements per OpenMP task: long runs for the vector loops.
constexpr int64_t BLOCK = 8192;

/// fn(i0, i1) over [0, n) in BLOCK-element pieces, on OpenMP threads when n is large.
template <class F>
void for_blocks(int64_t n, F fn) {
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (n > kParallelMinWork)
    for (int64_t k = 0; k < blocks; ++k) fn(k * BLOCK, std::min(n, (k + 1) * BLOCK));
}

}  // namespace

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
    check_nonneg("residual_forward n", n);
    for_blocks(n, [&](int64_t i0, int64_t i1) { residual_any(out, a, b, i0, i1); });
}

void accumulate(TensorRef dst, ConstTensorRef src, int64_t n) {
    check_nonneg("accumulate n", n);
    const bool d16 = dst.type == ScalarType::BF16, s16 = src.type == ScalarType::BF16;
    float* df = static_cast<float*>(dst.data);
    bf16* db = static_cast<bf16*>(dst.data);
    const float* sf = static_cast<const float*>(src.data);
    const bf16* sb = static_cast<const bf16*>(src.data);
    for_blocks(n, [&](int64_t i0, int64_t i1) {
        if (d16 && s16) add_bf16_bf16(db, sb, i0, i1);
        else if (d16) add_bf16_f32(db, sf, i0, i1);
        else if (s16) add_f32_bf16(df, sb, i0, i1);
        else add_f32_f32(df, sf, i0, i1);
    });
}

void scale(TensorRef x, float factor, int64_t n) {
    check_nonneg("scale n", n);
    for_blocks(n, [&](int64_t i0, int64_t i1) {
        if (x.type == ScalarType::BF16) scale_bf16(static_cast<bf16*>(x.data), factor, i0, i1);
        else scale_f32(static_cast<float*>(x.data), factor, i0, i1);
    });
}

void zero(TensorRef x, int64_t n) {
    check_nonneg("zero n", n);
    for_blocks(n, [&](int64_t i0, int64_t i1) {
        const int64_t bytes = scalar_type_bytes(x.type);
        std::memset(static_cast<char*>(x.data) + i0 * bytes, 0, size_t((i1 - i0) * bytes));
    });
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
    if (dst.type == ScalarType::BF16 && src.type == ScalarType::F32) {  // narrowing (matmul's bf16 C)
        bf16* d = static_cast<bf16*>(dst.data);
        const float* s = static_cast<const float*>(src.data);
        for_blocks(n, [&](int64_t i0, int64_t i1) { narrow_f32(d, s, i0, i1); });
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
