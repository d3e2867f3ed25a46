// What the optimizer declares to the memory plan: its state tensors (from optimizer_param_state,
// the one source of the layout) as plan buffers with their Appendix B rows, and the scratch its
// step needs for one tensor at a time on each backend (docs/optimizers.md §1; paper Eq. 2).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/memory_plan.h"
#include "optim/optimizer.h"

namespace skew {

/// The optimizer state of `opt` for every parameter as plan buffers "state.<param>.<kind>" (kind
/// STATE, fp32, FORWARD..OPTIMIZER), in table order and, per parameter, in optimizer_param_state's
/// order and shapes; `component` is the paper's Appendix B row. Throws skew::Error for an unknown
/// optimizer type.
std::vector<BufferSpec> optimizer_state_buffers(const OptimizerConfig& opt, const ParamTable& table);

/// The state the paper's accounting reports for `opt` (Table 1/3): the state bytes, except for
/// Muon, which the paper charges 4 B per parameter for every parameter (its internal Adam's extra
/// 4 B on Adam-routed parameters is reported separately, Table 1 footnote).
int64_t paper_state_bytes(const OptimizerConfig& opt, const ParamTable& table);

/// Device scratch bytes the CUDA step needs for parameter `p` (kernels/cuda/optim_kernels.h lays
/// it out by the formulas of kernels/cuda/workspace_sizes.h): the fused SkewAdam/Adafactor update's
/// reductions (per matrix when the second moment is factored, else one 1 x numel matrix), Muon's
/// Newton-Schulz matrices; 0 for the element-wise optimizers. Device-free.
int64_t cuda_optimizer_tensor_scratch_bytes(const OptimizerConfig& opt, const ParamInfo& p);

/// The largest cuda_optimizer_tensor_scratch_bytes over the table (tensors are stepped one at a time).
int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table);

/// The optimizer's scratch as one WORKSPACE buffer "ws.optimizer" (fp32, OPTIMIZER phase only, so
/// it shares bytes with the activations) for the plan's backend ("cpu" or "cuda"): Muon's
/// Newton-Schulz holds <= 4 matrices of its largest shape, GaLore 2 (projected gradient and its
/// back-projection), the element-wise optimizers per-matrix reductions only (at least 1024 words);
/// on "cuda" at least cuda_optimizer_scratch_bytes.
BufferSpec optimizer_scratch_buffer(const OptimizerConfig& opt, const ParamTable& table, BackendChoice backend);

}  // namespace skew
