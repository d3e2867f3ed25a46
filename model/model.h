// The MoE transformer of docs/design.md ("The paper's model"; paper Section 4), written once against the
// Backend ops interface: embedding + positions, per block pre-LayerNorm GQA attention and a dense
// SwiGLU FFN or a top-k MoE, final LayerNorm, tied LM head, cross-entropy + balance loss + z-loss.
// Activation recompute (train.recompute): by default the forward keeps each block's input and the
// backward recomputes the block; `attention` recomputes only the attention core, `none` nothing.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "model/activations.h"

namespace skew {

/// One parameter's weight and gradient in the arena, with its table entry.
struct ParamRef {
    const ParamInfo* info = nullptr;
    void* weight = nullptr;  // info->shape, info->dtype
    TensorRef grad;          // info->shape; bf16 or fp32 per runtime.grad_dtype (fp32 for fp32 params)
    int64_t numel() const { return info->numel(); }
    ConstTensorRef w() const {
        return ConstTensorRef(weight, info->dtype == DType::BF16 ? ScalarType::BF16 : ScalarType::F32);
    }
};

/// The parameters of one transformer block. Dense blocks fill ffn_*, MoE blocks router/expert_*.
struct BlockParams {
    ParamRef ln1_w, ln1_b;  // (d_model) fp32
    ParamRef wq;            // (n_heads*head_dim, d_model) bf16
    ParamRef wk, wv;        // (n_kv_heads*head_dim, d_model) bf16
    ParamRef wo;            // (d_model, n_heads*head_dim) bf16
    ParamRef bq, bk, bv;    // (n_heads*head_dim), (n_kv_heads*head_dim) x 2 fp32; absent without model.attention_bias
    ParamRef q_norm_w, k_norm_w;  // fp32 RMSNorm gains of q and k (model.qk_norm; absent with none): full
                                  // (n_heads*head_dim), (n_kv_heads*head_dim); per_head (head_dim) each
    ParamRef ln2_w, ln2_b;        // (d_model) fp32
    bool moe = false;
    ParamRef ffn_w1, ffn_w2;        // (d_ff, d_model) bf16
    ParamRef ffn_w3;                // (d_model, d_ff) bf16
    ParamRef router;                // (n_experts, d_model) fp32
    ParamRef expert_w1, expert_w2;  // (n_experts, d_expert, d_model) bf16
    ParamRef expert_w3;             // (n_experts, d_model, d_expert) bf16
    ParamRef shared_w1, shared_w2;  // (d_shared, d_model) bf16: the shared experts as one SwiGLU (absent: none)
    ParamRef shared_w3;             // (d_model, d_shared) bf16
    ParamRef shared_gate;           // (d_model) fp32: w_gate of model.shared_expert_gate sigmoid (absent: none)
    int moe_index = -1;             // position among the MoE blocks (routing stats), -1 for dense
};

/// A view of the model over an allocated arena: weights, gradients and activation slots by name
/// from the memory plan, and the backend that runs the ops. Owns nothing; the Config, ParamTable,
/// Arena and Backend must outlive it.
/// The operands one MoE block keeps for one microbatch in deferred mode (model/activations.h,
/// deferred_expert_buffers): X and dY of each expert bank's weight-gradient product, rows in expert
/// order, and each expert's row range [offsets[e], offsets[e+1]) (host copy). They are the block's
/// working slots for that microbatch too: d_moe_h1 and d_moe_h2 hold the pre-activations h1, h2
/// from the forward until the SwiGLU backward overwrites them in place with their gradients.
struct KeptExpertOperands {
    bf16* moe_in = nullptr;        // (NK, d): X of w1, w2
    bf16* moe_act = nullptr;       // (NK, de): X of w3
    bf16* d_moe_h1 = nullptr;      // (NK, de): dY of w1
    bf16* d_moe_h2 = nullptr;      // (NK, de): dY of w2
    bf16* d_moe_out = nullptr;     // (NK, d): dY of w3
    std::vector<int64_t> offsets;  // (E + 1), host
};

/// Deferred expert weight gradients (train.expert_grads: deferred; docs/design.md "Deferred expert
/// gradients"): the expert banks have no gradient buffer; the backward keeps their operands per
/// MoE block and microbatch, and the optimizer step forms one expert's dW at a time in `scratch`.
struct DeferredExperts {
    bool on = false;
    std::vector<std::vector<KeptExpertOperands>> kept;  // [block][microbatch]; empty for dense blocks
    TensorRef scratch;          // ws.expert_grad: one expert matrix (d_expert x d_model), grad dtype
    float* gram = nullptr;      // ws.expert_gram (fp32): partials (3 E) then two gram_rows^2 Gram blocks
    int64_t gram_rows = 0;      // rows of one Gram block (deferred_gram_chunk_rows)
    int64_t gram_partials = 0;  // fp32 words of partials before the blocks (deferred_gram_partials_words)
    float clip_coef = 1.0f;     // set by model_clip_gradients: the caller rescales the scratch by it
};

/// Expert parallelism (docs/distributed.md, "Expert parallel"): the MoE blocks' experts are split
/// across the M ranks of `comm` (the table's banks hold E/M experts, ParamInfo::expert_offset);
/// routing runs on the rank's own tokens over all E experts, token rows go to the owners of their
/// experts and come back by Communicator::alltoallv. Host copies of the last exchange's row counts
/// serve the backward of the same block (the recompute plans it again, identically).
struct ExpertParallelState {
    Communicator* comm =
        nullptr;  // the expert-parallel group: world_size() == M, rank() owns experts [rank*El, (rank+1)*El)
    int64_t M = 1, El = 0;
    std::vector<int64_t> send_rows, send_row_displs;  // (M) rows this rank sends to each owner, from moe_in's row
    std::vector<int64_t> recv_rows, recv_row_displs;  // (M) rows received from each rank, into ep_recv's row
    int64_t recv_total = 0;                           // R: rows this rank's experts run
    bool on() const { return M > 1; }
};

struct Model {
    const Config* cfg = nullptr;
    const ParamTable* table = nullptr;
    Arena* arena = nullptr;
    Backend* backend = nullptr;
    int64_t microbatch = 0;  // sequences per forward/backward (the plan's)
    int64_t seq_len = 0;     // T
    ParamRef wte;            // (padded_vocab_size, d_model) bf16
    ParamRef wpe;            // (max_seq_len, d_model) bf16; absent (no info) with rotary positions
    std::vector<BlockParams> blocks;
    ParamRef lnf_w, lnf_b;         // (d_model) fp32; lnf_b absent with RMSNorm (as each block's ln*_b)
    ParamRef head;                 // the LM head (padded_vocab_size, d_model) bf16: wte, or lm_head when untied
    std::vector<ParamRef> params;  // every parameter, in table order
    ActSlots act;                  // the activation table bound to the arena (model/activations.h)
    int64_t n_moe_blocks = 0;
    std::vector<int64_t> probe_rows;  // token rows (b*T + t) whose logits a forward copies out (tests)
    DeferredExperts deferred;         // train.expert_grads: deferred (empty kept when stored)
    ExpertParallelState ep;  // M = 1: every expert on this rank, no exchange (set comm with model_set_expert_comm)
    /// When set, model_forward_backward calls it during the backward each time a group of
    /// parameters has received its last gradient contribution of the microbatch (indices into
    /// `params`, ascending): the final LayerNorm after the head, each block's parameters after its
    /// backward (last block first), the two embeddings (the tied token embedding's second
    /// contribution) at the very end. On a device backend the gradients are enqueued, not yet
    /// computed, when it is called. The trainer sets it for the last microbatch of a step to start
    /// the gradient sums early (train/data_parallel.h, dp_arm_overlap); the model knows no more.
    std::function<void(std::span<const size_t> params)> grads_done;
};

/// The routing statistics of one MoE block for one forward pass.
struct MoeStats {
    int block = -1;               // transformer block index
    std::vector<int64_t> counts;  // (E) token copies routed to each expert
    float balance_loss = 0.0f;    // α·E·Σ p̄_i f_i, not divided by accum steps
    float z_loss = 0.0f;          // coef·mean(lse^2), not divided by accum steps
};

/// Loss parts of one microbatch (each the microbatch's own mean, NOT divided by accum steps) and
/// the routing stats. total = lm_loss + Σ (balance + z) over MoE blocks.
struct LossParts {
    double lm_loss = 0.0;       // mean cross-entropy over the microbatch's tokens (nats)
    double balance_loss = 0.0;  // Σ over MoE blocks
    double z_loss = 0.0;        // Σ over MoE blocks
    double total = 0.0;
    std::vector<MoeStats> moe;        // one per MoE block, in block order
    std::vector<float> probe_logits;  // (probe_rows.size(), padded_vocab_size) fp32 logits of Model::probe_rows
};

/// Bind the model to an arena allocated from a plan built with the same Config and ParamTable
/// (engine/memory_plan.h). The plan's microbatch and seq_len fix the shapes. Throws skew::Error
/// when a buffer is missing or a slot is too small (e.g. the backend's LM-head workspace).
Model model_bind(const Config& cfg, const ParamTable& table, Arena& arena, Backend& backend);

/// Attach the expert-parallel group to a model bound over an expert-parallel rank's table
/// (build_param_table with ExpertShard{M, comm.rank()}). Throws skew::Error when the table's M
/// (n_experts over the banks' experts) differs from comm.world_size(), or when the table's
/// expert_offset is not comm.rank() * E/M, or when the group moves another kind of memory than the
/// backend's (MPI host memory with the CUDA backend: use the NCCL group). M = 1 needs no call
/// (nullptr: today's path).
void model_set_expert_comm(Model& m, Communicator* comm);

/// Initialize every weight (docs/design.md, "The paper's model"): linear and embedding weights
/// N(0, init_std); attn.wo, ffn.w3 and experts.w3 N(0, init_std / sqrt(2 n_blocks)); the router
/// zero; norm weights 1 (LayerNorm, RMSNorm, q and k norms), norm and attention biases 0. Element i of parameter p draws philox_normal(seed,
/// PHILOX_STREAM_INIT, step 0, tensor p.index, element i), so every backend initializes alike.
/// bf16 weights are rounded to nearest even. The normals are drawn by Backend::init_normal (on the
/// device for the CUDA backend); ones and zeros are copied from the host.
void model_init(Model& m, uint64_t seed);

/// Set every gradient buffer to zero (once per optimizer step, before the microbatches).
void model_zero_grads(Model& m);

/// One microbatch of training: forward through every block keeping what train.recompute keeps
/// (block: only the block inputs; attention: every block's slots but the attention output and
/// logsumexp; none: everything; model/activations.h), the head (final LayerNorm, tied LM head,
/// cross-entropy), then backward block by block, first recomputing what was not kept from the kept
/// values (the whole block with the same router noise, or the attention core). Every mode runs the
/// same ops on the same values, so losses and gradients are bit-identical across modes. Loss weight 1/accum_steps on every
/// part (LM, balance, z), so gradients of `accum_steps` microbatches sum to the batch gradient.
/// Gradients ACCUMULATE into the arena's grad.* buffers (deferred expert gradients: the expert
/// banks' operands are kept for microbatch `microbatch_index` instead, m.deferred).
/// tokens, targets: (microbatch, seq_len) int32 host arrays; tokens in [0, padded_vocab_size),
/// targets in [0, vocab_size). microbatch_index: position of this microbatch in the step (keys
/// the router noise: token t of microbatch m draws at offset (m·N + t)·E, so 1×B and 4×B/4 see
/// the same noise). step: optimizer step (Philox counter). training=false: no router noise.
/// Returns the unscaled loss parts. Errors: a token or target out of range (skew::Error).
LossParts model_forward_backward(Model& m, const int32_t* tokens, const int32_t* targets, int64_t microbatch_index,
                                 uint32_t step, int64_t accum_steps, bool training = true);

/// Forward only (no noise, no gradients): the loss parts of one microbatch, e.g. for validation
/// (perplexity = exp of the mean LM loss over batches). Shapes as model_forward_backward.
LossParts model_eval(Model& m, const int32_t* tokens, const int32_t* targets);

/// Global gradient norm sqrt(Σ over every grad.* buffer of Σ g²), accumulated in double.
/// Non-finite gradients give a non-finite result. Under expert parallelism the expert banks' part
/// is summed over the expert-parallel group (an allreduce: every rank of the group must call it),
/// so the norm is the whole model's once the gradients are reduced.
double model_grad_norm(Model& m);

/// Clip gradients to global norm max_norm (PyTorch clip_grad_norm_: scale by
/// max_norm / (norm + 1e-6) when that is below 1). Returns the norm before clipping.
/// max_norm <= 0 disables clipping (the norm is still returned). A non-finite norm scales nothing
/// and is returned as is, for the caller to skip the step.
double model_clip_gradients(Model& m, double max_norm);

/// ||dY^T X||_F^2 from Gram matrices, in double: Σ_ij (X X^T)_ij (dY dY^T)_ij over the `rows`
/// rows of X (rows, in_features) and dY (rows, out_features), fp32 row-major; the squared
/// Frobenius norm of the weight gradient dW = dY^T X (out_features, in_features) without forming
/// it (docs/design.md "Deferred expert gradients"). rows x rows dot products: O(rows^2 (in+out)).
double gram_grad_sq_norm(const float* X, const float* dY, int64_t rows, int64_t in_features, int64_t out_features);

/// Rows a Gram product reads for a block of `rows` rows starting at row `first` of a buffer of
/// `total_rows` rows: `rows` rounded up to a multiple of `granularity` (the backend's
/// matmul_row_granularity), at most `max_rows`, moved back from `first` where it would pass the
/// buffer's end; the block's rows lie inside it. Granularity 1 gives the block itself. Throws
/// skew::Error when the block does not fit the buffer or max_rows.
struct RowWindow {
    int64_t first = 0, rows = 0;
};
RowWindow gram_row_window(int64_t first, int64_t rows, int64_t max_rows, int64_t total_rows, int64_t granularity);

/// The squared norm of every expert bank's gradient in deferred mode by the Gram identity, on the
/// backend with its matrix products: per expert, its rows over the step's microbatches in blocks
/// of at most gram_rows (a block lies in one microbatch); per pair of blocks (i <= j) the fp32 Gram
/// blocks G_X = X_i X_j^T and G_Y = dY_i dY_j^T and their dot product (Backend::dot_accumulate over
/// the blocks' rows_i x rows_j entries, weight 2 when i < j) accumulated into the expert's and
/// bank's fp32 partial (ws.expert_gram); the 3 E partials are read once and summed in double. w1
/// and w2 share G_X. The products read gram_row_window's rows, so a backend with per-shape plans
/// sees a small set of shapes however the tokens are routed.
/// 0 when m.deferred.on is false. model_grad_norm includes it. One host synchronization per call.
double deferred_expert_grad_sq_norm(Model& m);

/// deferred_expert_grad_sq_norm with the Gram products' row windows rounded to `granularity`
/// (gram_row_window) instead of the backend's matmul_row_granularity: the same norm up to fp32
/// rounding for every granularity >= 1.
double deferred_expert_grad_sq_norm(Model& m, int64_t granularity);

}  // namespace skew
