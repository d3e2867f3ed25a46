// Grouped expert matrix products for variable per-expert token counts (docs/design.md: 128 SwiGLU
// experts, dropless): forward (variable M), data gradient (variable M) and weight gradient
// (variable K). Two algorithms behind one interface: a per-expert cuBLASLt loop, and one cuBLAS
// grouped GEMM (cublasGemmGroupedBatchedEx) per projection and direction. Both need the expert
// offsets on the host (cuBLAS takes the per-group sizes as host arrays): the backend starts one
// asynchronous copy of the offsets into pinned memory when moe_dispatch writes them, and the
// products that follow wait on that copy instead of copying again. CPU twin:
// kernels/cpu/moe_dispatch.cpp; semantics: Backend::moe_matmul_* in kernels/backend.h.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/matmul.h"

namespace skew::cuda {

/// How the grouped products run. PER_EXPERT_LOOP: one cuBLASLt product per non-empty expert (the
/// backend's Matmul, its algorithm cache and workspace). CUBLAS_GROUPED: one
/// cublasGemmGroupedBatchedEx call per product, one group per non-empty expert, the operand
/// pointers written on the device from the device offsets; a dtype combination cuBLAS refuses
/// falls back to the loop (logged once).
enum class GroupedGemmAlgo : uint8_t { PER_EXPERT_LOOP, CUBLAS_GROUPED };

/// Name of an algorithm ("per_expert_loop", "cublas_grouped").
const char* grouped_gemm_algo_name(GroupedGemmAlgo a);

/// Device scratch bytes of one grouped product of n_experts (the operand pointer arrays):
/// kernels/cuda/workspace_sizes.h's moe_matmul_scratch_bytes.
int64_t moe_matmul_scratch_bytes(int64_t n_experts);

/// The grouped expert matmul: shares the backend's Matmul (algorithm cache, workspace).
class GroupedMatmul {
public:
    explicit GroupedMatmul(Matmul& mm, GroupedGemmAlgo algo = GroupedGemmAlgo::PER_EXPERT_LOOP);
    ~GroupedMatmul();
    GroupedMatmul(const GroupedMatmul&) = delete;
    GroupedMatmul& operator=(const GroupedMatmul&) = delete;

    GroupedGemmAlgo algo() const { return algo_; }
    /// Switch algorithms (CUBLAS_GROUPED creates its cuBLAS handle here, outside any step).
    void set_algo(GroupedGemmAlgo a);

    /// Start copying offsets (E+1 int64, device memory just written on `stream`) to pinned host
    /// memory; the products that follow with the same pointer and n_experts read that copy (after
    /// waiting for it) until forget_offsets(). One device-to-host copy per dispatch, no stream sync.
    /// Each offsets buffer (one per MoE block) keeps its own copy, up to kPrefetchSlots buffers
    /// (the least recently dispatched is reused beyond that), so every block's backward finds its
    /// forward's copy.
    void prefetch_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream);
    /// Drop every prefetched copy (the backend calls this whenever the host may have written
    /// device memory: synchronize and host copies), so offsets written otherwise are copied at the call.
    void forget_offsets();
    /// Offsets buffers whose prefetched copy is kept at once.
    static constexpr int kPrefetchSlots = 64;
    /// Device-to-host copies of offsets made so far (tests and benchmarks: one per dispatch).
    int64_t offset_copies() const { return offset_copies_; }

    /// out[rows of e] = inp[rows of e]·weight[e]^T for every expert e (Backend::moe_matmul_forward).
    /// out (n_rows, out_f), inp (n_rows, in_f) in expert order; weight (E, out_f, in_f); offsets
    /// (E+1) int64 device memory; scratch: moe_matmul_scratch_bytes(E) device bytes (CUBLAS_GROUPED).
    /// Errors: offsets decreasing (skew::Error naming the expert).
    void forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets, int64_t n_experts,
                 int64_t in_features, int64_t out_features, void* scratch, cudaStream_t stream);

    /// dinp[rows of e] = dout[rows of e]·weight[e] (overwritten or += when accumulate_dinp; null
    /// skips); dweight[e] += dout[rows of e]^T·inp[rows of e] (empty experts get nothing; null skips).
    void backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef weight,
                  const int64_t* offsets, int64_t n_experts, int64_t in_features, int64_t out_features,
                  bool accumulate_dinp, void* scratch, cudaStream_t stream);

private:
    const int64_t* host_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream, const char* op);
    // One grouped product (see moe_matmul.cpp); false when cuBLAS refused it (caller loops instead).
    // pass 0 forward (c = out, act = inp, other = weight), 1 data gradient (c = dinp, act = dout,
    // other = weight), 2 weight gradient (c = dweight, act = dout, other = inp).
    bool run_grouped(int pass, TensorRef c, ConstTensorRef act, ConstTensorRef other, const int64_t* dev_offsets,
                     const int64_t* off, int64_t n_experts, int64_t in_f, int64_t out_f, float beta, void* scratch,
                     cudaStream_t stream);
    void ensure_capacity(int64_t entries, cudaStream_t stream);

    Matmul& mm_;
    GroupedGemmAlgo algo_;
    cublasHandle_t cublas_ = nullptr;  // CUBLAS_GROUPED (created on first use)
    bool warned_fallback_ = false;
    int64_t* pinned_ = nullptr;  // (capacity_) host copy of offsets copied at the call
    int64_t capacity_ = 0;
    /// One prefetched copy: the device offsets it copies, its pinned buffer (`capacity` entries)
    /// and the event recorded after the copy.
    struct Prefetch {
        const int64_t* device = nullptr;  // null: the slot holds no valid copy
        int64_t n_experts = 0;
        int64_t* host = nullptr;
        int64_t capacity = 0;
        cudaEvent_t done = nullptr;
        int64_t last_use = 0;  // dispatch counter, for reuse of the oldest slot
    };
    std::vector<Prefetch> prefetch_;  // at most kPrefetchSlots
    int64_t dispatches_ = 0;
    int64_t offset_copies_ = 0;
    // host arrays of one cublasGemmGroupedBatchedEx call (reused)
    std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, group_size_;
    std::vector<cublasOperation_t> ta_, tb_;
    std::vector<float> alpha_, beta_;
};

/// Fill the device pointer arrays of one grouped product: for each non-empty expert e (in order,
/// group g), a[g] = a_base + (a_per_expert ? e·a_stride : off[e]·a_stride)·elem bytes, and alike for
/// b and c. ptrs holds 3·n_experts pointers (a | b | c). Launched on `stream` (moe_matmul_ptrs.cu).
struct GroupedOperand {
    const void* base = nullptr;
    int64_t stride_elems = 0;  // elements per expert (weights) or per row (activations)
    int64_t elem_bytes = 2;
    bool per_expert = false;  // weight bank indexed by expert; else rows from the offsets
};
void grouped_pointers(void** ptrs, const int64_t* offsets, int64_t n_experts, GroupedOperand a, GroupedOperand b,
                      GroupedOperand c, cudaStream_t stream);

}  // namespace skew::cuda
