// A model stood up on a backend: the one way `skew train`, `eval`, `sample`, the benches and the
// tests assemble config -> parameter table -> memory plan -> arena -> workspace -> model
// (docs/architecture.md, "The session"). A Session owns each of them, so nothing it hands out
// dangles; the backend's workspace is bound to the arena when it opens and released when it goes.
#pragma once
#include <cstdint>
#include <memory>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/memory_plan.h"
#include "engine/parallel_layout.h"
#include "engine/param_table.h"
#include "kernels/backend.h"
#include "model/inference.h"
#include "model/model.h"

namespace skew {

/// What a session plans memory for.
enum class SessionKind : uint8_t {
    TRAINING,   // weights, gradients, activations and one optimizer's state (build_memory_plan)
    INFERENCE,  // the same plan without optimizer state: weights and one microbatch's activations
};

/// How to open a session. The parameter tables default to build_param_table(cfg.model).
struct SessionSpec {
    SessionKind kind = SessionKind::TRAINING;
    /// The optimizer whose state the plan holds (TRAINING, required); INFERENCE: the plan of this
    /// optimizer (or AdamW's when null) with its state dropped, so activations match training's.
    const OptimizerConfig* optimizer = nullptr;
    int64_t microbatch = 1;  // sequences per forward; cfg.train.seq_len tokens each
    ParallelLayout layout;   // this rank's place (TRAINING; default one process)
    /// The parameters this rank holds (expert parallel: n_experts / M of each bank); null: all.
    const ParamTable* table = nullptr;
    /// The table the plan is sized from where it is not `table` (ZeRO-1 partitions the whole
    /// model's: build_memory_plan); null: `table`.
    const ParamTable* plan_table = nullptr;
    /// > 0: the LM head unfused, act.logits one chunk of at most this many tokens' fp32 logits (the
    /// chunked matmul + cross-entropy path, for its tests and benches); 0: the plan's slot.
    int64_t lm_head_chunk_tokens = 0;
};

/// A bound model and everything it points into. Not copyable or movable (the model, the arena and
/// the backend's binding point into it); held by unique_ptr.
struct Session {
    Config cfg;                  // the config the model was bound with (its pointer target)
    ParamTable table;            // the parameters this session holds
    MemoryPlan plan;             // the arena's plan (arena.plan points here)
    Arena arena;                 // weights, gradients, state, activations, workspaces
    Backend* backend = nullptr;  // not owned: outlives the session
    Model model;                 // bound to arena on backend

    Session() = default;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    /// Waits for the backend's queued work, then returns its workspace to backend-owned memory.
    ~Session();
};

/// Open a session of `cfg` on `backend`: plan (spec.kind), arena where the backend keeps its
/// memory (allocate_arena), the model bound to it, the backend's workspace bound last. Weights are
/// zero until loaded or model_init. Throws skew::Error as build_memory_plan, allocate_arena and
/// model_bind do, or when a TRAINING session names no optimizer.
std::unique_ptr<Session> open_session(const Config& cfg, Backend& backend, const SessionSpec& spec);

/// The plan's arena where `backend` keeps its memory: host memory (allocate_host_arena), or the
/// backend's device memory (Backend::allocate_device_memory) for a backend with device_memory().
/// Throws skew::Error naming the plan's size and optimizer when it cannot be had.
Arena allocate_arena(const MemoryPlan& plan, Backend& backend);

/// The arena's buffers the backend uses for its own work (the plan's backend_workspace:
/// ws.library, ws.cuda_scratch, ws.cuda_widen), for Backend::bind_workspace; absent ones empty.
BackendWorkspaceMemory backend_workspace_memory(const Arena& arena);

/// A KV cache for model `m` (bound by a session) of up to max_len positions (model/inference.h): its buffers
/// (kv_cache_buffers) in an arena of their own on the model's backend, bound by name; on a
/// backend whose matmul widens bf16 weights at every call, fp32 copies of the LM head and the
/// non-expert linear weights too (4 bytes per parameter; exact, so results are unchanged; the
/// weights must not change while the cache is used). Errors: max_len outside [1,
/// model.max_seq_len] (skew::Error).
KvCache open_kv_cache(const Model& m, int64_t max_len);

}  // namespace skew
