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

/// Phases of one optimizer step, in order. A buffer lives over [first, last] (less HEAD for a
/// block's working slot, BufferSpec::dead_in_head); two buffers that live in no common phase may
/// share arena bytes. FORWARD runs every block and keeps each block's input (per-block activation
/// checkpointing; train.recompute keeps more, model/activations.h); HEAD is the final LayerNorm, LM
/// head and cross-entropy forward and backward; BACKWARD recomputes what the forward did not keep
/// of one block and back-propagates through it (slots not kept per block serve every block in
/// turn); OPTIMIZER is the update.
enum class Phase : uint8_t { FORWARD = 0, HEAD = 1, BACKWARD = 2, OPTIMIZER = 3 };

/// Kinds of optimizer state tensors (all fp32).
enum class StateKind : uint8_t {
    MOMENTUM,     // M, numel (SkewAdam backbone; AdamW m; Lion m; Muon buffer)
    SECOND_FULL,  // V, numel (SkewAdam router/vectors; AdamW v; Adafactor vectors)
    SECOND_ROW,   // R, (n_matrices, rows): EMA of row means of G^2
    SECOND_COL,   // C, (n_matrices, cols): EMA of column means of G^2
    ADAM_M,       // Muon's internal Adam first moment, numel
    ADAM_V,       // Muon's internal Adam second moment, numel
    GALORE_P,     // GaLore projector(s): reference P (r x cols or rows x r); paper U (rows x r)
    GALORE_Q,     // paper form only: V^T (r x cols)
    GALORE_M,     // Adam m in the projected space
    GALORE_V,     // Adam v in the projected space
};
/// A state kind as buffer names spell it: "state.<param>.<name>".
template <>
struct ChoiceNames<StateKind> {
    static constexpr std::array<std::pair<StateKind, std::string_view>, 10> items{{{StateKind::MOMENTUM, "m"},
                                                                                   {StateKind::SECOND_FULL, "v"},
                                                                                   {StateKind::SECOND_ROW, "row"},
                                                                                   {StateKind::SECOND_COL, "col"},
                                                                                   {StateKind::ADAM_M, "adam_m"},
                                                                                   {StateKind::ADAM_V, "adam_v"},
                                                                                   {StateKind::GALORE_P, "galore_p"},
                                                                                   {StateKind::GALORE_Q, "galore_q"},
                                                                                   {StateKind::GALORE_M, "galore_m"},
                                                                                   {StateKind::GALORE_V, "galore_v"}}};
};

/// One buffer of the plan.
struct BufferSpec {
    std::string name;  // "weight.<param>", "grad.<param>", "state.<param>.<kind>", "act.<slot>", "ws.<name>"
    BufferKind kind;
    DType dtype;
    std::vector<int64_t> shape;
    Phase first = Phase::FORWARD;
    Phase last = Phase::OPTIMIZER;
    /// A block's working slot (FORWARD..BACKWARD) that the backward's recompute writes again before
    /// reading it: it holds nothing live during HEAD, so the arena lends its bytes to the head's
    /// buffers (the LM head's logits) in that phase.
    bool dead_in_head = false;
    int param = -1;                         // index into the ParamTable (weights, grads, state), else -1
    StateKind state = StateKind::MOMENTUM;  // meaningful for kind == STATE
    std::string component;                  // the plan-table row this buffer is counted in

    int64_t numel() const;
    int64_t bytes() const;
    bool lives_in(Phase p) const { return first <= p && p <= last && !(dead_in_head && p == Phase::HEAD); }
};

/// One row of the Appendix B table: component, parameters it covers, state kept, bytes.
struct PlanComponent {
    std::string name;
    int64_t params = 0;
    std::string state_kept;
    int64_t bytes = 0;
};

/// Tokens per chunk of the model's unfused LM head: its act.logits slot holds at least
/// min(N, LOGITS_CHUNK_TOKENS) x padded_vocab_size fp32 logits (model/activations.h); the CPU
/// backend's fused head works in chunks of at most as many tokens (kernels/cpu/workspace_sizes.h).
constexpr int64_t LOGITS_CHUNK_TOKENS = 512;

/// The backend a plan is sized for: "cpu" for runtime.backend cpu, else "cuda" (auto plans for
/// the GPU; the trainer plans with the backend it resolved).
BackendChoice plan_backend(const Config& cfg);

/// The device memory a CUDA process holds outside the arena (CUDA context, cuBLAS/cuBLASLt handles
/// and their workspaces, module images), bytes, for CUDA major version `cuda_major`: the constant
/// `skew plan` adds when no GPU is present. Measured on an H200 at CUDA 13 (docs/design.md §8):
/// whole-device peak minus the arena's plan, 0.67-0.77 GiB over the paper model's optimizers; the
/// upper value is returned so that a budget answer is not optimistic (the tiny model measured
/// 66 MiB: the constant overstates small models). Other major versions are unmeasured and get the
/// CUDA 13 value.
int64_t cuda_runtime_overhead_bytes(int cuda_major);

/// The CUDA major version `skew plan` assumes: the toolkit's this build was compiled with, else 13.
int cuda_plan_major_version();

/// Weights "weight.<param>" (the table's dtype) and gradients "grad.<param>" (grad_dtype for
/// bf16 parameters, fp32 for fp32 ones) of every parameter, in table order, live the whole step.
std::vector<BufferSpec> parameter_buffers(const ParamTable& table, DType grad_dtype);

struct MemoryPlan {
    std::string optimizer;   // OptimizerConfig::name
    int64_t microbatch = 0;  // sequences per forward/backward
    int64_t seq_len = 0;
    std::vector<BufferSpec> buffers;              // weights, grads, state, activations, workspace
    std::vector<int64_t> offsets;                 // arena offset of each buffer (bytes, 256-aligned)
    std::vector<PlanComponent> state_components;  // Appendix B rows for this optimizer
    int64_t param_count = 0;
    int64_t weights_bytes = 0;
    int64_t grads_bytes = 0;
    int64_t state_bytes = 0;
    int64_t paper_state_bytes = 0;
    int64_t activation_bytes = 0;  // peak bytes of the activation region (after lifetime sharing)
    int64_t workspace_bytes = 0;
    int64_t peak_bytes = 0;  // the arena total: what the run allocates

    /// Index of the buffer with this name, or -1. Names of workspace buffers: `ws_buffer`.
    int find(const std::string& name) const;
    /// Index of parameter `param`'s (ParamInfo::index) weight buffer, or -1.
    int weight_of(int64_t param) const;
    /// Index of its gradient buffer, or -1 (the deferred expert banks have none).
    int grad_of(int64_t param) const;
    /// Index of its optimizer state of `kind`, or -1 (another optimizer, or a ZeRO-1 rank that
    /// does not own the parameter).
    int state_of(int64_t param, StateKind kind) const;
};

/// A parameter's buffer names in the plan, spelled here once (`skew plan --json` and the
/// checkpoint's tensor names show them): "weight.<param>", "grad.<param>", "state.<param>.<kind>".
/// Binders find these buffers by parameter index (MemoryPlan::weight_of, grad_of, state_of).
std::string weight_buffer_name(const std::string& param);
std::string grad_buffer_name(const std::string& param);
std::string state_buffer_name(const std::string& param, StateKind kind);
/// The parameter of a weight buffer's name (weight_buffer_name's inverse); other names unchanged.
std::string param_of_weight_buffer(const std::string& buffer_name);

/// The names of the plan's workspace buffers, each spelled once here: declared by their owners
/// (engine/cuda_plan.cpp, optim/state_plan.cpp, model/activations.cpp) and found by the session,
/// the model and the optimizer with MemoryPlan::find.
namespace ws_buffer {
inline constexpr const char* LIBRARY = "ws.library";            // cuBLASLt workspace (runtime.workspace_gib)
inline constexpr const char* CUDA_SCRATCH = "ws.cuda_scratch";  // the CUDA ops' scratch
inline constexpr const char* CUDA_WIDEN = "ws.cuda_widen";      // fp32 widening of bf16 matmul weights
inline constexpr const char* OPTIMIZER = "ws.optimizer";        // the optimizer step's scratch
inline constexpr const char* EXPERT_GRAD = "ws.expert_grad";    // one expert's gradient (deferred mode)
inline constexpr const char* EXPERT_GRAM = "ws.expert_gram";    // Gram blocks of the deferred norm
}  // namespace ws_buffer

/// Lay out declared buffers as one plan (the arithmetic of paper Eq. 2 / Appendix B): totals per
/// kind (workspace: the backends' ws.library and ws.cuda_*; activations: the peak of the rest
/// after lifetime sharing), the Appendix B rows of the STATE buffers in tier order, and the arena
/// offsets of layout_arena. `buffers` in plan order (weights, gradients, state, activations,
/// workspace). Throws skew::Error when a buffer or the total exceeds 4 EiB.
MemoryPlan lay_out_memory_plan(const std::string& optimizer, int64_t microbatch, int64_t seq_len,
                               const ParamTable& table, std::vector<BufferSpec> buffers, int64_t paper_state_bytes);

constexpr double GIB = 1024.0 * 1024.0 * 1024.0;
constexpr double MIB = 1024.0 * 1024.0;

}  // namespace skew
