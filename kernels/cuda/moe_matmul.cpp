// Grouped expert matmul, baseline: the per-expert cuBLASLt loop (docs/architecture.md, "MoE expert products",
// "host-synced sort + loop"; TE's original GroupedLinear). The offsets come to pinned host memory
// once per call; each non-empty expert is one cuBLASLt product on the backend's stream. Host code.
#include "kernels/cuda/moe_matmul.h"

#include <cuda_runtime_api.h>

#include "engine/error.h"
#include "kernels/cuda/cuda_check.h"

namespace skew::cuda {

namespace {

TensorRef at(TensorRef t, int64_t elems) {
    return TensorRef(static_cast<char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}
ConstTensorRef at(ConstTensorRef t, int64_t elems) {
    return ConstTensorRef(static_cast<const char*>(t.data) + elems * scalar_type_bytes(t.type), t.type);
}

}  // namespace

GroupedMatmul::GroupedMatmul(Matmul& mm, GroupedGemmAlgo algo) : mm_(mm), algo_(algo) {}

GroupedMatmul::~GroupedMatmul() {
    if (pinned_) cudaFreeHost(pinned_);
}

const int64_t* GroupedMatmul::host_offsets(const int64_t* offsets, int64_t n_experts, cudaStream_t stream,
                                           const char* op) {
    if (n_experts < 0) fail("{}: negative n_experts {}", op, n_experts);
    if (n_experts + 1 > capacity_) {
        if (pinned_) cuda_check(cudaFreeHost(pinned_));
        pinned_ = nullptr;
        cuda_check(cudaMallocHost(reinterpret_cast<void**>(&pinned_), size_t(n_experts + 1) * sizeof(int64_t)));
        capacity_ = n_experts + 1;
    }
    cuda_check(cudaMemcpyAsync(pinned_, offsets, size_t(n_experts + 1) * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
    for (int64_t e = 0; e < n_experts; ++e)
        if (pinned_[e + 1] < pinned_[e]) fail("{}: offsets decrease at expert {}", op, e);
    return pinned_;
}

void GroupedMatmul::forward(TensorRef out, ConstTensorRef inp, ConstTensorRef weight, const int64_t* offsets,
                            int64_t n_experts, int64_t in_features, int64_t out_features, cudaStream_t stream) {
    const int64_t* off = host_offsets(offsets, n_experts, stream, "moe_matmul_forward");
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = off[e], rows = off[e + 1] - r0;
        if (rows == 0) continue;
        mm_.run(at(out, r0 * out_features), at(inp, r0 * in_features), at(weight, e * out_features * in_features),
                MatmulShape{rows, out_features, in_features, false, true}, stream);
    }
}

void GroupedMatmul::backward(TensorRef dinp, TensorRef dweight, ConstTensorRef dout, ConstTensorRef inp,
                             ConstTensorRef weight, const int64_t* offsets, int64_t n_experts, int64_t in_features,
                             int64_t out_features, bool accumulate_dinp, cudaStream_t stream) {
    const int64_t* off = host_offsets(offsets, n_experts, stream, "moe_matmul_backward");
    for (int64_t e = 0; e < n_experts; ++e) {
        const int64_t r0 = off[e], rows = off[e + 1] - r0;
        if (rows == 0) continue;  // an expert without tokens gets no gradient
        if (dinp)
            mm_.run(at(dinp, r0 * in_features), at(dout, r0 * out_features), at(weight, e * out_features * in_features),
                    MatmulShape{rows, in_features, out_features, false, false, 1.0f, accumulate_dinp ? 1.0f : 0.0f},
                    stream);
        if (dweight)
            mm_.run(at(dweight, e * out_features * in_features), at(dout, r0 * out_features), at(inp, r0 * in_features),
                    MatmulShape{out_features, in_features, rows, true, false, 1.0f, 1.0f}, stream);
    }
}

}  // namespace skew::cuda
