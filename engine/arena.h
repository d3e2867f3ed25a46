// The flat arena: one allocation holding every buffer of the memory plan at its planned offset
// (256-byte aligned; buffers overlap only where their lifetimes are disjoint). Host memory on the
// CPU backend; one cudaMalloc on the CUDA backend (engine/cuda/arena_cuda.cu).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/memory_plan.h"
#include "kernels/backend.h"

namespace skew {

constexpr int64_t ARENA_ALIGNMENT = 256;

/// Lay buffers out: returns each buffer's byte offset and sets *total_bytes to the arena size.
/// Buffers that are live in every phase go first in order; the rest are placed greedily
/// (largest first, lowest offset whose interval is free among buffers with intersecting
/// lifetimes). Offsets are multiples of ARENA_ALIGNMENT, 64-bit.
std::vector<int64_t> layout_arena(const std::vector<BufferSpec>& buffers, int64_t* total_bytes);

enum class ArenaDevice : uint8_t { HOST, CUDA };

/// An allocated arena. Pointers come from `ptr(name)`; the arena owns its memory.
struct Arena {
    ArenaDevice device = ArenaDevice::HOST;
    char* base = nullptr;
    int64_t bytes = 0;
    const MemoryPlan* plan = nullptr;
    std::unordered_map<std::string, int> index;  // buffer name -> plan buffer index
    bool guarded = false;  // test mode: poison-filled, a canary after every buffer (allocate_host_arena_guarded)

    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    Arena(Arena&& other) noexcept;
    Arena& operator=(Arena&& other) noexcept;
    ~Arena();

    /// Pointer to the named buffer; throws skew::Error naming it when the plan has no such buffer.
    void* ptr(const std::string& name) const;
    template <typename T>
    T* get(const std::string& name) const { return static_cast<T*>(ptr(name)); }
    /// Pointer to plan buffer i.
    void* ptr(int i) const;
};

/// Allocate host memory for the plan (zero-filled, 256-byte aligned). Throws skew::Error when
/// the allocation fails, with the plan's size in GiB.
Arena allocate_host_arena(const MemoryPlan& plan);

/// Test mode, for catching reads of memory no op wrote and writes outside a buffer: the canary
/// (ARENA_CANARY_BYTES or more of ARENA_CANARY_BYTE) follows every buffer, and buffers get poison.
constexpr int64_t ARENA_CANARY_BYTES = 256;
constexpr unsigned char ARENA_CANARY_BYTE = 0xA5;
constexpr unsigned char ARENA_POISON_BYTE = 0xFF;  // every fp32 and bf16 word NaN, every int32 -1

/// Re-lay `plan` for the test mode: every buffer its own bytes (no lifetime sharing, so a stale
/// read cannot find another buffer's data by chance), each followed by at least ARENA_CANARY_BYTES
/// before the next. Rewrites plan.offsets and plan.peak_bytes.
void layout_arena_guarded(MemoryPlan& plan);

/// Allocate a host arena for a plan laid out by layout_arena_guarded: STATE buffers zero (the
/// optimizers' initial state, as in allocate_host_arena), every other buffer ARENA_POISON_BYTE,
/// every gap ARENA_CANARY_BYTE. Throws skew::Error like allocate_host_arena.
Arena allocate_host_arena_guarded(const MemoryPlan& plan);

/// The names of buffers of a guarded host arena whose canary (the bytes after the buffer, up to
/// the next buffer or the end) is no longer intact: something wrote past the buffer's end. Empty
/// when all are intact. Throws skew::Error for an arena that is not guarded.
std::vector<std::string> arena_broken_canaries(const Arena& arena);
/// The plan's arena where `backend` keeps its memory: host memory, or one device allocation
/// (allocate_cuda_arena) for a backend with device_memory(). Throws skew::Error as those do.
Arena allocate_arena(const MemoryPlan& plan, const Backend& backend);

/// The arena's buffers the backend uses for its own work (the plan's backend_workspace: ws.library,
/// ws.cuda_scratch, ws.cuda_widen), for Backend::bind_workspace; absent ones stay empty.
BackendWorkspaceMemory backend_workspace_memory(const Arena& arena);

#if defined(SKEW_HAVE_CUDA)
/// One cudaMalloc of plan.peak_bytes (zeroed). Throws skew::Error with the plan's numbers and the
/// device's free memory when it does not fit or there is no GPU.
Arena allocate_cuda_arena(const MemoryPlan& plan);

/// Device memory in use on the current CUDA device, in bytes: total - free from cudaMemGetInfo
/// (the whole device: this process's arena, library workspaces and context, and any other
/// process's allocations). 0 when the query fails. The trainer samples it after every step and
/// reports the maximum as the run's measured peak.
int64_t cuda_device_used_bytes();

/// Free memory on the current CUDA device in bytes (cudaMemGetInfo), or -1 when the query fails.
int64_t cuda_device_free_bytes();
#endif

}  // namespace skew
