// The flat arena: layout (256-byte aligned offsets, lifetime-aware sharing), the host allocation,
// and adopting memory a backend allocated (runtime/session.cpp).
#include "engine/arena.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <numeric>

#include "engine/error.h"

namespace skew {
namespace {

int64_t align_up(int64_t x) { return (x + ARENA_ALIGNMENT - 1) / ARENA_ALIGNMENT * ARENA_ALIGNMENT; }

bool persistent(const BufferSpec& b) { return b.first == Phase::FORWARD && b.last == Phase::OPTIMIZER; }

constexpr Phase PHASES[] = {Phase::FORWARD, Phase::HEAD, Phase::BACKWARD, Phase::OPTIMIZER};

// The bytes in use during one phase as disjoint intervals begin -> end, touching ones merged.
using BusyBytes = std::map<int64_t, int64_t>;

void mark_busy(BusyBytes& m, int64_t begin, int64_t end) {
    auto it = m.upper_bound(begin);
    if (it != m.begin()) {
        const auto prev = std::prev(it);
        if (prev->second >= begin) {
            begin = prev->first;
            end = std::max(end, prev->second);
            it = m.erase(prev);
        }
    }
    while (it != m.end() && it->first <= end) {
        end = std::max(end, it->second);
        it = m.erase(it);
    }
    m.emplace(begin, end);
}

}  // namespace

std::vector<int64_t> layout_arena(const std::vector<BufferSpec>& buffers, int64_t* total_bytes) {
    std::vector<int64_t> offsets(buffers.size(), -1);
    int64_t cursor = 0;
    // Persistent buffers: in order, back to back.
    for (size_t i = 0; i < buffers.size(); ++i) {
        if (!persistent(buffers[i])) continue;
        offsets[i] = cursor;
        cursor = align_up(cursor + buffers[i].bytes());
    }
    const int64_t base = cursor;
    int64_t end = cursor;
    // The rest: largest first, lowest free offset among buffers whose lifetimes intersect.
    std::vector<size_t> rest;
    for (size_t i = 0; i < buffers.size(); ++i)
        if (!persistent(buffers[i])) rest.push_back(i);
    std::stable_sort(rest.begin(), rest.end(),
                     [&](size_t a, size_t b) { return buffers[a].bytes() > buffers[b].bytes(); });
    // Two buffers conflict when they live in a common phase, so the bytes a buffer must avoid are
    // the union of the busy bytes of its phases: first fit over that union places it where first
    // fit over every conflicting buffer would, with a few merged intervals to scan instead of every
    // buffer placed so far (quadratic: 80,000 buffers of a 4,096-block model took minutes).
    BusyBytes busy_in[std::size(PHASES)];
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (size_t i : rest) {
        busy.clear();
        for (size_t p = 0; p < std::size(PHASES); ++p)
            if (buffers[i].lives_in(PHASES[p])) busy.insert(busy.end(), busy_in[p].begin(), busy_in[p].end());
        std::sort(busy.begin(), busy.end());
        int64_t at = base;
        const int64_t need = align_up(buffers[i].bytes());
        for (auto [b, e] : busy) {
            if (b >= at + need) break;
            at = std::max(at, e);
        }
        offsets[i] = at;
        end = std::max(end, at + need);
        if (need > 0)
            for (size_t p = 0; p < std::size(PHASES); ++p)
                if (buffers[i].lives_in(PHASES[p])) mark_busy(busy_in[p], at, at + need);
    }
    *total_bytes = std::max(end, cursor);
    return offsets;
}

Arena::Arena(Arena&& o) noexcept { *this = std::move(o); }

Arena& Arena::operator=(Arena&& o) noexcept {
    if (this != &o) {
        std::swap(device, o.device);
        std::swap(base, o.base);
        std::swap(bytes, o.bytes);
        std::swap(plan, o.plan);
        std::swap(index, o.index);
        std::swap(guarded, o.guarded);
        std::swap(release, o.release);
    }
    return *this;
}

void* Arena::ptr(int i) const { return base + plan->offsets[size_t(i)]; }

void* Arena::ptr(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end()) fail("arena: the memory plan has no buffer named '{}'", name);
    return ptr(it->second);
}

Arena::~Arena() {
    if (!base) return;
    if (release) release(base);
    else std::free(base);
}

Arena allocate_host_arena(const MemoryPlan& plan) {
    Arena a;
    a.device = ArenaDevice::HOST;
    a.bytes = plan.peak_bytes;
    a.plan = &plan;
    const size_t size = size_t(std::max<int64_t>(
        ARENA_ALIGNMENT, (plan.peak_bytes + ARENA_ALIGNMENT - 1) / ARENA_ALIGNMENT * ARENA_ALIGNMENT));
    a.base = static_cast<char*>(std::aligned_alloc(ARENA_ALIGNMENT, size));
    if (!a.base)
        fail("arena: cannot allocate {:.2f} GiB of host memory for the plan of optimizer '{}' (microbatch {})",
             double(plan.peak_bytes) / GIB, plan.optimizer, plan.microbatch);
    std::memset(a.base, 0, size);
    for (size_t i = 0; i < plan.buffers.size(); ++i) a.index.emplace(plan.buffers[i].name, int(i));
    return a;
}

void layout_arena_guarded(MemoryPlan& plan) {
    plan.offsets.assign(plan.buffers.size(), 0);
    int64_t cursor = 0;
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
        plan.offsets[i] = cursor;
        cursor = align_up(cursor + plan.buffers[i].bytes() + ARENA_CANARY_BYTES);
    }
    plan.peak_bytes = cursor;
}

Arena allocate_host_arena_guarded(const MemoryPlan& plan) {
    Arena a = allocate_host_arena(plan);
    a.guarded = true;
    std::memset(a.base, ARENA_CANARY_BYTE, size_t(a.bytes));
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
        const BufferSpec& b = plan.buffers[i];
        if (plan.offsets[i] + b.bytes() + ARENA_CANARY_BYTES > a.bytes)
            fail("arena: buffer '{}' has no canary after it: lay the plan out with layout_arena_guarded", b.name);
        std::memset(a.base + plan.offsets[i], b.kind == BufferKind::STATE ? 0 : ARENA_POISON_BYTE, size_t(b.bytes()));
    }
    return a;
}

std::vector<std::string> arena_broken_canaries(const Arena& a) {
    if (!a.guarded || a.device != ArenaDevice::HOST) fail("arena: canaries are checked on a guarded host arena only");
    const MemoryPlan& plan = *a.plan;
    std::vector<size_t> order(plan.buffers.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return plan.offsets[x] < plan.offsets[y]; });
    std::vector<std::string> broken;
    for (size_t k = 0; k < order.size(); ++k) {
        const size_t i = order[k];
        const int64_t begin = plan.offsets[i] + plan.buffers[i].bytes();
        const int64_t end = k + 1 < order.size() ? plan.offsets[order[k + 1]] : a.bytes;
        for (int64_t j = begin; j < end; ++j)
            if (static_cast<unsigned char>(a.base[j]) != ARENA_CANARY_BYTE) {
                broken.push_back(plan.buffers[i].name);
                break;
            }
    }
    return broken;
}

Arena adopt_arena(const MemoryPlan& plan, char* base, int64_t bytes, ArenaDevice device,
                  std::function<void(char*)> release) {
    Arena a;
    a.device = device;
    a.base = base;
    a.bytes = bytes;
    a.plan = &plan;
    a.release = std::move(release);
    for (size_t i = 0; i < plan.buffers.size(); ++i) a.index.emplace(plan.buffers[i].name, int(i));
    return a;
}

}  // namespace skew
