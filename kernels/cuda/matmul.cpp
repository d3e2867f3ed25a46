// cuBLASLt wrapper for every dense matrix product of the CUDA backend (docs/design.md: bf16 storage, fp32
// accumulation; router in fp32). Host code only, compiled by the host compiler; the dtype widening
// it sometimes needs runs on the device through elementwise.h's convert. Source of the pattern:
// llm.c llmc/matmul.cuh (descriptors, top-1 heuristic, 16-byte alignment, fp32 compute).
#include "kernels/cuda/matmul.h"

#include <cublasLt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "engine/error.h"
#include "kernels/cuda/cublaslt_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_alloc.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/matmul_args.h"

namespace skew::cuda {

namespace {

constexpr int64_t kDefaultWorkspace = int64_t(32) << 20;

cudaDataType_t cuda_type(ScalarType t) { return t == ScalarType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Largest power of two (<= 16) dividing the address: cuBLASLt's alignment preference.
uint32_t pointer_alignment(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 16;
    while (al > 1 && (a % al) != 0) al >>= 1;
    return al;
}

struct Key {
    int64_t m, n, k;
    bool ta, tb, beta_nonzero;
    int at, bt, ct;
    uint32_t align_a, align_b, align_c;
    auto tie() const { return std::tie(m, n, k, ta, tb, beta_nonzero, at, bt, ct, align_a, align_b, align_c); }
    bool operator<(const Key& o) const { return tie() < o.tie(); }
};

}  // namespace

struct Matmul::Impl {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    int64_t workspace_bytes = 0;
    bool owns_workspace = false;
    std::map<Key, LtPlan> plans;  // descriptors and the chosen algorithm of each cached shape
    // fp32 widening buffers for dtype combinations cuBLASLt does not take
    float* widen = nullptr;  // own
    int64_t widen_elems = 0;
    float* ext_widen = nullptr;  // caller-owned (arena)
    int64_t ext_widen_elems = 0;
    bool warned_widen = false;  // the first widening outside the caller's buffer is logged

    ~Impl() {
        plans.clear();  // the descriptors before the handle
        if (owns_workspace) device_free(workspace);
        device_free(widen);
        if (handle) cublasLtDestroy(handle);
    }

    float* widen_buffer(int64_t elems) {
        if (ext_widen && elems <= ext_widen_elems) return ext_widen;
        if (elems > widen_elems) {
            if (!warned_widen) {
                warned_widen = true;
                spdlog::warn(
                    "matmul: a mixed-dtype product needs {} bytes of fp32 widening buffer, the caller's "
                    "(ws.cuda_widen) holds {}; allocating outside the arena",
                    elems * 4, ext_widen_elems * 4);
            }
            if (widen) {
                cuda_check(cudaDeviceSynchronize());  // queued products may still read the old buffer
                device_free(widen);
            }
            widen = nullptr;
            widen = static_cast<float*>(device_alloc(elems * int64_t(sizeof(float)), "matmul: widening buffer"));
            widen_elems = elems;
        }
        return widen;
    }

    const LtPlan& plan_for(const Key& key) {
        auto it = plans.find(key);
        if (it != plans.end()) return it->second;
        LtPlan p;
        // Row-major C (m, n) is column-major C^T (n, m) = op(B)^T · op(A)^T: cuBLASLt's "A" is our B
        // and its "B" is our A, each with the transpose flag of the row-major operand.
        const cudaDataType_t at = cudaDataType_t(key.at), bt = cudaDataType_t(key.bt), ct = cudaDataType_t(key.ct);
        p.desc = lt_matmul_desc(key.tb, key.ta);
        // Stored column-major shapes: our B row-major (k, n) -> col-major (n, k), ld n; (n, k) -> (k, n), ld k.
        p.a = key.tb ? lt_matrix_layout(bt, key.k, key.n, key.k) : lt_matrix_layout(bt, key.n, key.k, key.n);
        // our A row-major (m, k) -> col-major (k, m), ld k; (k, m) -> (m, k), ld m.
        p.b = key.ta ? lt_matrix_layout(at, key.m, key.k, key.m) : lt_matrix_layout(at, key.k, key.m, key.k);
        p.c = lt_matrix_layout(ct, key.n, key.m, key.n);
        const LtAlignment al{key.align_b, key.align_a, key.align_c, key.align_c};  // cuBLASLt's A is our B
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        if (!lt_choose_algo(handle, p, uint64_t(workspace_bytes), al, st))
            fail(
                "matmul: cuBLASLt has no algorithm for m {} n {} k {} trans_a {} trans_b {} (A {}, B {}, C {}; "
                "alignment {}/{}/{} bytes; status {})",
                key.m, key.n, key.k, key.ta, key.tb, key.at == CUDA_R_16BF ? "bf16" : "fp32",
                key.bt == CUDA_R_16BF ? "bf16" : "fp32", key.ct == CUDA_R_16BF ? "bf16" : "fp32", key.align_a,
                key.align_b, key.align_c, int(st));
        return plans.emplace(key, std::move(p)).first->second;
    }

    // Run one product whose dtypes cuBLASLt takes: (bf16, bf16) -> bf16|fp32, or (fp32, fp32) -> fp32.
    void run_native(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s, cudaStream_t stream) {
        const Key key{s.m,
                      s.n,
                      s.k,
                      s.trans_a,
                      s.trans_b,
                      s.beta != 0.0f,
                      int(cuda_type(a.type)),
                      int(cuda_type(b.type)),
                      int(cuda_type(c.type)),
                      pointer_alignment(a.data),
                      pointer_alignment(b.data),
                      pointer_alignment(c.data)};
        const LtPlan& p = plan_for(key);
        const float alpha = s.alpha, beta = s.beta;
        cublas_check(cublasLtMatmul(handle, p.desc.get(), &alpha, b.data, p.a.get(), a.data, p.b.get(), &beta, c.data,
                                    p.c.get(), c.data, p.c.get(), &p.algo, workspace, size_t(workspace_bytes), stream));
    }
};

Matmul::Matmul() : impl_(std::make_unique<Impl>()) {
    cublas_check(cublasLtCreate(&impl_->handle));
    impl_->workspace = device_alloc(kDefaultWorkspace, "matmul: cuBLASLt workspace");
    impl_->workspace_bytes = kDefaultWorkspace;
    impl_->owns_workspace = true;
}

Matmul::~Matmul() = default;

void Matmul::set_widen_buffer(float* buffer, int64_t elems) {
    if (elems < 0) fail("matmul: negative widening buffer size {}", elems);
    impl_->ext_widen = buffer;
    impl_->ext_widen_elems = buffer ? elems : 0;
}

void Matmul::set_workspace(void* workspace, int64_t bytes) {
    if (bytes < 0) fail("matmul: negative workspace size {}", bytes);
    if (impl_->owns_workspace && impl_->workspace) {
        cuda_check(cudaDeviceSynchronize());
        device_free(impl_->workspace);
    }
    impl_->workspace = workspace;
    impl_->workspace_bytes = workspace ? bytes : 0;
    impl_->owns_workspace = false;
    impl_->plans.clear();  // algorithms were chosen for the old workspace size: choose again
}

int64_t Matmul::cached_shapes() const { return int64_t(impl_->plans.size()); }

void* Matmul::workspace() const { return impl_->workspace; }

int64_t Matmul::workspace_bytes() const { return impl_->workspace_bytes; }

void Matmul::run(TensorRef c, ConstTensorRef a, ConstTensorRef b, const MatmulShape& s, cudaStream_t stream) {
    const int64_t m = s.m, n = s.n, k = s.k;
    matmul_check_args(c, a, b, s);
    if (m == 0 || n == 0) return;
    if (k == 0) {  // empty reduction: C = beta * C
        if (s.beta == 0.0f) zero(c, m * n, stream);
        else if (s.beta != 1.0f) scale(c, s.beta, m * n, stream);
        return;
    }
    const bool ab_bf16 = a.type == ScalarType::BF16 && b.type == ScalarType::BF16;
    const bool ab_f32 = a.type == ScalarType::F32 && b.type == ScalarType::F32;
    if (ab_bf16 || (ab_f32 && c.type == ScalarType::F32)) {
        impl_->run_native(c, a, b, s, stream);
        return;
    }
    // Widen bf16 operands (and a bf16 C) to fp32, multiply in fp32, round C once.
    const int64_t na = a.type == ScalarType::BF16 ? m * k : 0, nb = b.type == ScalarType::BF16 ? k * n : 0;
    const int64_t nc = c.type == ScalarType::BF16 ? m * n : 0;
    float* buf = impl_->widen_buffer(std::max<int64_t>(1, na + nb + nc));
    ConstTensorRef a32 = a, b32 = b;
    if (na) {
        convert(TensorRef(buf), a, na, stream);
        a32 = ConstTensorRef(static_cast<const float*>(buf));
    }
    if (nb) {
        convert(TensorRef(buf + na), b, nb, stream);
        b32 = ConstTensorRef(static_cast<const float*>(buf + na));
    }
    if (nc) {
        float* c32 = buf + na + nb;
        if (s.beta != 0.0f) convert(TensorRef(c32), c, nc, stream);
        impl_->run_native(TensorRef(c32), a32, b32, s, stream);
        convert(c, ConstTensorRef(static_cast<const float*>(c32)), nc, stream);
    } else {
        impl_->run_native(c, a32, b32, s, stream);
    }
}

}  // namespace skew::cuda
