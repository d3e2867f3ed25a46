// The memory plan: every buffer a training run holds (weights, gradients, optimizer state,
// activation slots, workspace) with dtype, shape and lifetime, and the closed-form totals of
// paper Eq. 2 / Appendix B. `skew plan` and the trainer use the same plan; the arena is laid out
// from it, and the plan's predicted peak is that layout's total.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/param_table.h"

namespace skew {

enum class BufferKind : uint8_t { WEIGHT, GRAD, STATE, ACTIVATION, WORKSPACE };

/// Phases of one optimizer step, in order. A buffer lives over [first, last]; two buffers whose
/// lifetimes do not intersect may share arena bytes. FORWARD runs every block and keeps only each
/// block's input (per-block activation checkpointing); HEAD is the final LayerNorm, LM head and
/// cross-entropy forward and backward; BACKWARD recomputes one block from its saved input and
/// back-propagates through it (the same slots serve every block in turn); OPTIMIZER is the update.
enum class Phase : uint8_t { FORWARD = 0, HEAD = 1, BACKWARD = 2, OPTIMIZER = 3 };

/// Kinds of optimizer state tensors (all fp32).
enum class StateKind : uint8_t {
    MOMENTUM,      // M, numel (SkewAdam backbone; AdamW m; Lion m; Muon buffer)
    SECOND_FULL,   // V, numel (SkewAdam router/vectors; AdamW v; Adafactor vectors)
    SECOND_ROW,    // R, (n_matrices, rows): EMA of row means of G^2
    SECOND_COL,    // C, (n_matrices, cols): EMA of column means of G^2
    ADAM_M,        // Muon's internal Adam first moment, numel
    ADAM_V,        // Muon's internal Adam second moment, numel
    GALORE_P,      // GaLore projector(s): reference P (r x cols or rows x r); paper U (rows x r)
    GALORE_Q,      // paper form only: V^T (r x cols)
    GALORE_M,      // Adam m in the projected space
    GALORE_V,      // Adam v in the projected space
};
const char* state_kind_name(StateKind k);

/// One buffer of the plan.
struct BufferSpec {
    std::string name;            // "weight.<param>", "grad.<param>", "state.<param>.<kind>", "act.<slot>", "ws.<name>"
    BufferKind kind;
    DType dtype;
    std::vector<int64_t> shape;
    Phase first = Phase::FORWARD;
    Phase last = Phase::OPTIMIZER;
    int param = -1;              // index into the ParamTable (weights, grads, state), else -1
    StateKind state = StateKind::MOMENTUM;  // meaningful for kind == STATE
    std::string component;       // the plan-table row this buffer is counted in

    int64_t numel() const;
    int64_t bytes() const;
    bool lives_in(Phase p) const { return first <= p && p <= last; }
};

/// One row of the Appendix B table: component, parameters it covers, state kept, bytes.
struct PlanComponent {
    std::string name;
    int64_t params = 0;
    std::string state_kept;
    int64_t bytes = 0;
};

/// The optimizer state of `opt` for every parameter, as buffers (kind STATE), in table order.
/// Closed form of paper Eq. 2 generalized to every optimizer and tier policy:
/// research/optimizers.md §1. Throws skew::Error for an unknown optimizer type.
std::vector<BufferSpec> optimizer_state_buffers(const OptimizerConfig& opt, const ParamTable& table);

/// The state the paper's accounting reports for `opt` (Table 1/3): equal to the state bytes
/// except for Muon, which the paper charges 4 B per parameter for every parameter (its internal
/// Adam's extra 4 B on Adam-routed parameters is reported separately, Table 1 footnote).
int64_t paper_state_bytes(const OptimizerConfig& opt, const ParamTable& table);

/// Whether Muon sends parameter `p` to its internal Adam (embeddings, positions, router, vectors)
/// rather than Newton-Schulz; role-based, from the parameter table.
bool muon_uses_adam(const ParamInfo& p);

/// The activation slots of one microbatch (sequences) of length seq_len with per-block
/// checkpointing, and the workspace; see activation_plan.cpp for the list.
std::vector<BufferSpec> activation_buffers(const Config& cfg, int64_t microbatch);

/// The backend a plan is sized for: "cpu" for runtime.backend cpu, else "cuda" (auto plans for
/// the GPU; the trainer plans with the backend it resolved).
std::string plan_backend(const Config& cfg);

/// The CUDA backend's device scratch for one microbatch (sequences) as WORKSPACE buffers
/// (FORWARD..BACKWARD): ws.cuda_scratch (fp32 words holding the largest op scratch: embedding/LayerNorm/
/// attention backward, router, dispatch sort, grad-norm partials) and, with MoE blocks,
/// ws.cuda_widen (fp32, the router's bf16 operands widened). Formulas: engine/cuda_workspace.h.
std::vector<BufferSpec> cuda_workspace_buffers(const Config& cfg, const ParamTable& table, int64_t microbatch);

/// Device scratch bytes the CUDA optimizer step needs for its largest tensor (one tensor at a
/// time): the fused SkewAdam/Adafactor update's reductions, or Muon's Newton-Schulz matrices.
int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table);
/// The same from the plan's state buffers of `opt` (optimizer_state_buffers), not computed again.
int64_t cuda_optimizer_scratch_bytes(const OptimizerConfig& opt, const ParamTable& table,
                                     const std::vector<BufferSpec>& state);

struct MemoryPlan {
    std::string optimizer;        // OptimizerConfig::name
    int64_t microbatch = 0;       // sequences per forward/backward
    int64_t seq_len = 0;
    std::vector<BufferSpec> buffers;       // weights, grads, state, activations, workspace
    std::vector<int64_t> offsets;          // arena offset of each buffer (bytes, 256-aligned)
    std::vector<PlanComponent> state_components;  // Appendix B rows for this optimizer
    int64_t param_count = 0;
    int64_t weights_bytes = 0;
    int64_t grads_bytes = 0;
    int64_t state_bytes = 0;
    int64_t paper_state_bytes = 0;
    int64_t activation_bytes = 0;  // peak bytes of the activation region (after lifetime sharing)
    int64_t workspace_bytes = 0;
    int64_t peak_bytes = 0;        // the arena total: what the run allocates

    /// Index of the buffer with this name, or -1.
    int find(const std::string& name) const;
};

/// Build the full plan for one optimizer and microbatch (sequences; must divide batch_size).
MemoryPlan build_memory_plan(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                             int64_t microbatch);

/// The largest microbatch (a divisor of train.batch_size) whose plan peak fits `budget_bytes`;
/// 0 when none does.
int64_t largest_fitting_microbatch(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt,
                                   int64_t budget_bytes);

constexpr double GIB = 1024.0 * 1024.0 * 1024.0;
constexpr double MIB = 1024.0 * 1024.0;

}  // namespace skew
