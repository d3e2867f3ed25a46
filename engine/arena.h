// The flat arena: one allocation holding every buffer of the memory plan at its planned offset
// (256-byte aligned; buffers overlap only where their lifetimes are disjoint). Host memory here;
// a backend's device memory is adopted (runtime/session.h allocates it through the Backend).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/memory_plan.h"

namespace skew {

constexpr int64_t ARENA_ALIGNMENT = 256;

/// Lay buffers out: returns each buffer's byte offset and sets *total_bytes to the arena size.
/// Buffers that are live in every phase go first in order; the rest are placed greedily
/// (largest first, lowest offset whose interval is free among buffers with intersecting
/// lifetimes). Offsets are multiples of ARENA_ALIGNMENT, 64-bit.
std::vector<int64_t> layout_arena(const std::vector<BufferSpec>& buffers, int64_t* total_bytes);

/// Where an arena's (and a tensor's) bytes are: host memory, or a backend's device memory.
enum class ArenaDevice : uint8_t { HOST, DEVICE };

/// An allocated arena. Pointers come from `ptr(name)`; the arena owns its memory.
struct Arena {
    ArenaDevice device = ArenaDevice::HOST;
    char* base = nullptr;
    int64_t bytes = 0;
    const MemoryPlan* plan = nullptr;
    std::unordered_map<std::string, int> index;  // buffer name -> plan buffer index
    bool guarded = false;  // test mode: poison-filled, a canary after every buffer (allocate_host_arena_guarded)
    std::function<void(char*)> release;  // frees `base` of an adopted (device) arena; empty: std::free

    Arena() = default;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    Arena(Arena&& other) noexcept;
    Arena& operator=(Arena&& other) noexcept;
    ~Arena();

    /// Pointer to the named buffer; throws skew::Error naming it when the plan has no such buffer.
    void* ptr(const std::string& name) const;
    template <typename T>
    T* get(const std::string& name) const {
        return static_cast<T*>(ptr(name));
    }
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
/// An arena over `bytes` bytes at `base` allocated elsewhere (a backend's device memory, zeroed by
/// it), freed by `release` when the arena goes. The plan must outlive the arena.
Arena adopt_arena(const MemoryPlan& plan, char* base, int64_t bytes, ArenaDevice device,
                  std::function<void(char*)> release);

}  // namespace skew
