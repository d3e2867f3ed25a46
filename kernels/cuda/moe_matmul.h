// Grouped expert matrix products for variable per-expert token counts (docs/design.md: 128 SwiGLU
// experts, dropless; docs/architecture.md, "MoE expert products"): forward (variable M), data gradient (variable M) and
// weight gradient (variable K). Behind one interface so the algorithm can change; the baseline is a
// per-expert cuBLASLt loop with the counts copied to the host. CPU twin: kernels/cpu/moe_dispatch.cpp.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cuda/matmul.h"

namespace skew::cuda {

/// How the grouped products run. PER_EXPERT_LOOP: offsets copied to pinned host memory (one stream
/// sync per call), one cuBLASLt product per non-empty expert. Future: a device-scheduled Hopper
/// grouped kernel needing no host copy.
enum class GroupedGemmAlgo : uint8_t { PER_EXPERT_LOOP };

/// The grouped expert matmul: shares the backend's Matmul (algorithm cache, workspace).
class GroupedMatmul {
public:
    explicit GroupedMatmul(Matmul& mm, GroupedGemmAlgo algo = GroupedGemmAlgo::PER_EXPERT_LOOP);
    ~GroupedMatmul();
    GroupedMatmul(const GroupedMatmul&) = delete;
    GroupedMatmul& operator=(const GroupedMatmul&) = delete;

    GroupedGemmAlgo algo() const { return algo_; }

    /// out[rows of e] = inp[rows of e]·weight[e]^T for every expert e (Backend::moe_matmul_forward).
    /// out (n_rows, out_f), inp (n_rows, in_f) in expert order; weight (E, out_f, in_f); offsets
    /// (E+1) int64 device memory. Errors: offsets decreasing (skew::Error naming the expert).
    void forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets, int64_t n_experts,
                 int64_t in_features, int64_t out_features, cudaStream_t stream);

    /// dinp[rows of e] = dout[rows of e]·weight[e] (overwritten or += when accumulate_dinp; null
    /// skips); dweight[e] += dout[rows of e]^T·inp[rows of e] (empty experts get nothing; null skips).
    void backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp, ConstTensorRef weight,
                  const int64_t* offsets, int64_t n_experts, int64_t in_features, int64_t out_features,
                  bool accumulate_dinp, cudaStream_t stream);

private:
    const int64_t* host_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream, const char* op);

    Matmul& mm_;
    GroupedGemmAlgo algo_;
    int64_t* pinned_ = nullptr;  // (capacity) host copy of the offsets
    int64_t capacity_ = 0;
};

}  // namespace skew::cuda
