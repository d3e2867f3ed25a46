// CUDA MoE router in fp32 (docs/design.md, "Router (fp32)"): Philox noise, softmax, top-k (distinct,
// ties to the lower index), renormalized gates, expert counts, the Switch balance loss and the
// z-loss, and the gradient to the clean logits. CPU twin: kernels/cpu/moe_router.cpp; semantics:
// Backend::moe_router_* in kernels/backend.h. Noise draws the same Philox numbers as the CPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/backend.h"

namespace skew::cuda {

/// Device scratch bytes of moe_router_forward (counts, per-token z terms, mean probabilities).
int64_t moe_router_forward_scratch_bytes(const RouterShape& s);

/// Router forward (Backend::moe_router_forward). probs (n, E), gates (n, k) fp32; expert_idx (n, k)
/// int32; counts (E) int64, balance_loss (1), z_loss (1), mean_probs (E) fp32 device memory, the
/// last four nullable. Reductions over tokens are fixed trees in double (deterministic).
void moe_router_forward(float* probs, int32_t* expert_idx, float* gates, int64_t* counts, float* balance_loss,
                        float* z_loss, float* mean_probs, const float* logits, const RouterShape& s,
                        const RouterOptions& o, void* scratch, cudaStream_t stream);

/// Router backward (Backend::moe_router_backward): dlogits (n, E) fp32 overwritten; dgates nullable.
void moe_router_backward(float* dlogits, const float* dgates, const float* logits, const float* probs,
                         const int32_t* expert_idx, const float* gates, const int64_t* counts, float d_balance,
                         float d_z, const RouterShape& s, const RouterOptions& o, cudaStream_t stream);

}  // namespace skew::cuda
