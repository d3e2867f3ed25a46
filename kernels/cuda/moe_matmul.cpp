// Grouped expert matmul (moe_matmul.h): the per-expert cuBLASLt loop (docs/architecture.md, "MoE expert products",
// TE's original GroupedLinear) and one cublasGemmGroupedBatchedEx per product (cuBLAS
// "Grouped GEMM" API: sizes in host arrays, operand pointers in device arrays). Offsets reach the
// host once per dispatch through prefetch_offsets. Host code.
#include "kernels/cuda/moe_matmul.h"

#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <limits>

#include "engine/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_alloc.h"
#include "kernels/cuda/workspace_sizes.h"

namespace skew::cuda {

namespace {

constexpr int64_t kInitialExperts = 1024;  // pinned offsets for up to this many experts at construction

TensorRef at(TensorRef t, int64_t elems) {
    return TensorRef(static_cast<char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}
ConstTensorRef at(ConstTensorRef t, int64_t elems) {
    return ConstTensorRef(static_cast<const char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}

cudaDataType_t cuda_type(ScalarType t) { return t == ScalarType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

}  // namespace

const char* grouped_gemm_algo_name(GroupedGemmAlgo a) {
    return a == GroupedGemmAlgo::CUBLAS_GROUPED ? "cublas_grouped" : "per_expert_loop";
}

int64_t moe_matmul_scratch_bytes(int64_t n_experts) { return cuda_ws::moe_matmul_scratch_bytes(n_experts); }

GroupedMatmul::GroupedMatmul(Matmul& mm, GroupedGemmAlgo algo) : mm_(mm), algo_(GroupedGemmAlgo::PER_EXPERT_LOOP) {
    ensure_capacity(kInitialExperts + 1, nullptr);
    set_algo(algo);
}

GroupedMatmul::~GroupedMatmul() {
    for (Prefetch& p : prefetch_) {
        if (p.done) cudaEventSynchronize(p.done);  // a copy may still write the buffer
        pinned_host_free(p.host);
        if (p.done) cudaEventDestroy(p.done);
    }
    pinned_host_free(pinned_);
    if (cublas_) cublasDestroy(cublas_);
}

void GroupedMatmul::set_algo(GroupedGemmAlgo a) {
    if (a == GroupedGemmAlgo::CUBLAS_GROUPED && !cublas_) cublas_check(cublasCreate(&cublas_));
    algo_ = a;
}

void GroupedMatmul::ensure_capacity(int64_t entries, cudaStream_t stream) {
    if (entries <= capacity_) return;
    (void)stream;  // the copy at the call synchronizes before it returns: nothing writes pinned_ now
    pinned_host_free(pinned_);
    pinned_ = nullptr;
    pinned_ =
        static_cast<int64_t*>(pinned_host_alloc(entries * int64_t(sizeof(int64_t)), "moe_matmul: pinned offsets"));
    capacity_ = entries;
}

void GroupedMatmul::forget_offsets() {
    for (Prefetch& p : prefetch_) p.device = nullptr;
}

void GroupedMatmul::prefetch_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream) {
    if (n_experts < 0) fail("moe_dispatch: negative n_experts {}", n_experts);
    // this buffer's slot, else a free one, else a new one, else the least recently dispatched
    Prefetch* slot = nullptr;
    for (Prefetch& p : prefetch_)
        if (p.device == offsets) slot = &p;
    if (!slot)
        for (Prefetch& p : prefetch_)
            if (!p.device) {
                slot = &p;
                break;
            }
    if (!slot && int(prefetch_.size()) < kPrefetchSlots) {
        prefetch_.emplace_back();
        slot = &prefetch_.back();
        cuda_check(cudaEventCreateWithFlags(&slot->done, cudaEventDisableTiming));
    }
    if (!slot) {
        slot = &prefetch_.front();
        for (Prefetch& p : prefetch_)
            if (p.last_use < slot->last_use) slot = &p;
    }
    if (slot->capacity < n_experts + 1) {
        if (slot->host) cuda_check(cudaEventSynchronize(slot->done));  // its last copy may still write it
        pinned_host_free(slot->host);
        slot->host = nullptr;
        slot->host = static_cast<int64_t*>(
            pinned_host_alloc((n_experts + 1) * int64_t(sizeof(int64_t)), "moe_matmul: pinned prefetched offsets"));
        slot->capacity = n_experts + 1;
    }
    // the copy is ordered after the previous one into this buffer on the same stream
    cuda_check(
        cudaMemcpyAsync(slot->host, offsets, size_t(n_experts + 1) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaEventRecord(slot->done, stream));
    slot->device = offsets;
    slot->n_experts = n_experts;
    slot->last_use = ++dispatches_;
    ++offset_copies_;
}

const int64_t* GroupedMatmul::host_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream,
                                           const char* op) {
    if (n_experts < 0) fail("{}: negative n_experts {}", op, n_experts);
    const int64_t* h = nullptr;
    const Prefetch* hit = nullptr;
    for (const Prefetch& p : prefetch_)
        if (p.device == offsets && p.n_experts == n_experts) hit = &p;
    if (hit) {
        cuda_check(cudaEventSynchronize(hit->done));
        h = hit->host;
    } else {
        ensure_capacity(n_experts + 1, stream);
        cuda_check(
            cudaMemcpyAsync(pinned_, offsets, size_t(n_experts + 1) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
        cuda_check(cudaStreamSynchronize(stream));
        ++offset_copies_;
        h = pinned_;
    }
    for (int64_t e = 0; e < n_experts; ++e)
        if (h[e + 1] < h[e]) fail("{}: offsets decrease at expert {}", op, e);
    return h;
}

bool GroupedMatmul::run_grouped(int pass, TensorRef c, ConstTensorRef act, ConstTensorRef other,
                                const int64_t* dev_offsets, const int64_t* off, int64_t E, int64_t in_f, int64_t out_f,
                                float beta, void* scratch, cudaStream_t stream) {
    if (act.type != ScalarType::BF16 || other.type != ScalarType::BF16) return false;
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    if (in_f > kIntMax || out_f > kIntMax || E > kIntMax) return false;
    if (!scratch) fail("moe_matmul: the grouped GEMM needs {} bytes of device scratch", moe_matmul_scratch_bytes(E));
    // host arrays: one group of one problem per non-empty expert, in expert order (as the kernel)
    m_.clear(), n_.clear(), k_.clear(), lda_.clear(), ldb_.clear(), ldc_.clear(), group_size_.clear();
    ta_.clear(), tb_.clear(), alpha_.clear(), beta_.clear();
    for (int64_t e = 0; e < E; ++e) {
        const int64_t rows = off[e + 1] - off[e];
        if (rows <= 0) continue;
        if (rows > kIntMax) return false;
        const int r = int(rows), fi = int(in_f), fo = int(out_f);
        switch (pass) {
            case 0:  // out^T (out_f x rows) = W[e] (T) · inp^T
                ta_.push_back(CUBLAS_OP_T), tb_.push_back(CUBLAS_OP_N);
                m_.push_back(fo), n_.push_back(r), k_.push_back(fi);
                lda_.push_back(fi), ldb_.push_back(fi), ldc_.push_back(fo);
                break;
            case 1:  // dinp^T (in_f x rows) = W[e] (N) · dout^T
                ta_.push_back(CUBLAS_OP_N), tb_.push_back(CUBLAS_OP_N);
                m_.push_back(fi), n_.push_back(r), k_.push_back(fo);
                lda_.push_back(fi), ldb_.push_back(fo), ldc_.push_back(fi);
                break;
            default:  // dW[e]^T (in_f x out_f) += inp^T (N) · dout (T)
                ta_.push_back(CUBLAS_OP_N), tb_.push_back(CUBLAS_OP_T);
                m_.push_back(fi), n_.push_back(fo), k_.push_back(r);
                lda_.push_back(fi), ldb_.push_back(fo), ldc_.push_back(fi);
                break;
        }
        alpha_.push_back(1.0f);
        beta_.push_back(beta);
        group_size_.push_back(1);
    }
    const int groups = int(m_.size());
    if (groups == 0) return true;
    // device pointer arrays from the device offsets: A | B | C, E entries each
    void** ptrs = static_cast<void**>(scratch);
    const int64_t ab = 2;  // bf16 operands
    GroupedOperand a, b, cc;
    cc.base = c.data;
    cc.elem_bytes = scalar_type_bytes(c.type);
    switch (pass) {
        case 0:
            a = GroupedOperand{other.data, out_f * in_f, ab, true};  // W[e]
            b = GroupedOperand{act.data, in_f, ab, false};           // inp rows
            cc.stride_elems = out_f;                                 // out rows
            break;
        case 1:
            a = GroupedOperand{other.data, out_f * in_f, ab, true};  // W[e]
            b = GroupedOperand{act.data, out_f, ab, false};          // dout rows
            cc.stride_elems = in_f;                                  // dinp rows
            break;
        default:
            a = GroupedOperand{other.data, in_f, ab, false};  // inp rows
            b = GroupedOperand{act.data, out_f, ab, false};   // dout rows
            cc.stride_elems = out_f * in_f;                   // dW[e]
            cc.per_expert = true;
            break;
    }
    grouped_pointers(ptrs, dev_offsets, E, a, b, cc, stream);
    if (!cublas_) cublas_check(cublasCreate(&cublas_));
    cublas_check(cublasSetStream(cublas_, stream));  // resets the workspace: give it the Matmul's again
    cublas_check(cublasSetWorkspace(cublas_, mm_.workspace(), size_t(mm_.workspace_bytes())));
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        cublas_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(), ptrs, CUDA_R_16BF, lda_.data(),
        ptrs + E, CUDA_R_16BF, ldb_.data(), beta_.data(), ptrs + 2 * E, cuda_type(c.type), ldc_.data(), groups,
        group_size_.data(), CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
        if (!warned_fallback_) {
            warned_fallback_ = true;
            spdlog::warn(
                "moe_matmul: cublasGemmGroupedBatchedEx refused bf16 x bf16 -> {} (status {}); using the "
                "per-expert loop",
                c.type == ScalarType::BF16 ? "bf16" : "fp32", int(st));
        }
        return false;
    }
    cublas_check(st);
    return true;
}

void GroupedMatmul::forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                            int64_t n_experts, int64_t in_features, int64_t out_features, void* scratch,
                            cudaStream_t stream) {
    const int64_t* off = host_offsets(offsets, n_experts, stream, "moe_matmul_forward");
    if (algo_ == GroupedGemmAlgo::CUBLAS_GROUPED &&
        run_grouped(0, out, inp, weight, offsets, off, n_experts, in_features, out_features, 0.0f, scratch, stream))
        return;
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = off[e], rows = off[e + 1] - r0;
        if (rows == 0) continue;
        mm_.run(at(out, r0 * out_features), at(inp, r0 * in_features), at(weight, e * out_features * in_features),
                MatmulShape{rows, out_features, in_features, false, true}, stream);
    }
}

void GroupedMatmul::backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                             int64_t out_features, bool accumulate_dinp, void* scratch, cudaStream_t stream) {
    const int64_t* off = host_offsets(offsets, n_experts, stream, "moe_matmul_backward");
    const bool grouped = algo_ == GroupedGemmAlgo::CUBLAS_GROUPED;
    const bool dinp_done = dinp && grouped &&
                           run_grouped(1, dinp, dout, weight, offsets, off, n_experts, in_features, out_features,
                                       accumulate_dinp ? 1.0f : 0.0f, scratch, stream);
    const bool dw_done =
        dweight && grouped &&
        run_grouped(2, dweight, dout, inp, offsets, off, n_experts, in_features, out_features, 1.0f, scratch, stream);
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = off[e], rows = off[e + 1] - r0;
        if (rows == 0) continue;  // an expert without tokens gets no gradient
        if (dinp && !dinp_done)
            mm_.run(at(dinp, r0 * in_features), at(dout, r0 * out_features), at(weight, e * out_features * in_features),
                    MatmulShape{rows, in_features, out_features, false, false, 1.0f, accumulate_dinp ? 1.0f : 0.0f},
                    stream);
        if (dweight && !dw_done)
            mm_.run(at(dweight, e * out_features * in_features), at(dout, r0 * out_features), at(inp, r0 * in_features),
                    MatmulShape{out_features, in_features, rows, true, false, 1.0f, 1.0f}, stream);
    }
}

}  // namespace skew::cuda
