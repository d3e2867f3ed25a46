// NVTX ranges (header-only nvtx3) so Nsight Systems shows every phase by name: forward and backward
// per block, optimizer per tier. `SKEW_NVTX_RANGE("block 1 moe forward");` pushes now, pops at scope
// end. Safe to include from code built without CUDA: where the nvtx3 / CUDA headers are not on the
// include path (a target that does not link CUDA::cudart), every range and profiler call is a no-op.
//
// The same ranges also time themselves without any profiler (docs/profiling.md): with the
// environment variable SKEW_RANGE_TIMES set (a file path, or "-" for stderr), every range opened
// between profiler_start() and profiler_stop() (the trainer's --profile-steps A:B) records a CUDA
// event at push and at pop on the legacy default stream, which orders after all work queued on the
// backend's (blocking) stream, so a range's time is the GPU timeline between its ends. At
// profiler_stop() the table (range path, calls, ms per profiled step) is written there.
#pragma once

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>) && __has_include(<cuda_profiler_api.h>)
#define SKEW_HAVE_NVTX 1
#endif
#endif

#if defined(SKEW_HAVE_NVTX)
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#endif

namespace skew::cuda {

#if defined(SKEW_HAVE_NVTX)
namespace range_times {

/// The self-timing of the NVTX ranges (one per process; host code on one thread, as the trainer).
struct State {
    bool enabled = false;  // SKEW_RANGE_TIMES is set
    bool active = false;   // between profiler_start and profiler_stop
    std::string out;       // file path or "-"
    int depth = 0;         // NVTX nesting depth (every range, timed or not)
    struct Open {
        std::string path;
        int depth;
        cudaEvent_t start;
    };
    struct Done {
        std::string path;
        cudaEvent_t start, end;
    };
    std::vector<Open> open;
    std::vector<Done> done;
    std::vector<cudaEvent_t> pool;
    cudaEvent_t event() {
        cudaEvent_t e = nullptr;
        if (!pool.empty()) {
            e = pool.back();
            pool.pop_back();
        } else if (cudaEventCreate(&e) != cudaSuccess) {
            e = nullptr;
        }
        if (e) cudaEventRecord(e, cudaStreamLegacy);  // after all work queued on blocking streams
        return e;
    }
};

inline State& state() {
    static State s = [] {
        State x;
        const char* v = std::getenv("SKEW_RANGE_TIMES");
        x.enabled = v && *v;
        if (x.enabled) x.out = v;
        return x;
    }();
    return s;
}

// "step 12/backward/block 3 backward" -> "step/backward/block 3 backward": steps aggregate.
inline std::string strip_step(const std::string& path) {
    if (path.rfind("step ", 0) != 0) return path;
    const size_t slash = path.find('/');
    return "step" + (slash == std::string::npos ? std::string() : path.substr(slash));
}

inline void push(const char* name) {
    State& s = state();
    ++s.depth;
    if (!s.active) return;
    std::string path = s.open.empty() ? std::string(name) : s.open.back().path + "/" + name;
    cudaEvent_t e = s.event();
    if (e) s.open.push_back(State::Open{std::move(path), s.depth, e});
}

inline void pop() {
    State& s = state();
    if (s.active && !s.open.empty() && s.open.back().depth == s.depth) {
        if (cudaEvent_t e = s.event())
            s.done.push_back(State::Done{std::move(s.open.back().path), s.open.back().start, e});
        s.open.pop_back();
    }
    --s.depth;
}

inline void start() {
    State& s = state();
    if (!s.enabled) return;
    s.active = true;
    s.open.clear();
    s.done.clear();
}

// Close what is still open, wait for the GPU, and write the table: every range path (steps merged)
// with its calls and milliseconds per profiled step, then the optimizer's ranges per tier
// ("optimizer <tier> <tensor>" summed by tier).
inline void stop() {
    State& s = state();
    if (!s.active) return;
    while (!s.open.empty()) {
        if (cudaEvent_t e = s.event()) s.done.push_back(State::Done{s.open.back().path, s.open.back().start, e});
        s.open.pop_back();
    }
    s.active = false;
    cudaDeviceSynchronize();
    struct Row {
        double ms = 0.0;
        long calls = 0;
    };
    std::map<std::string, Row> rows, tiers;
    long steps = 0;
    for (const State::Done& d : s.done) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, d.start, d.end) != cudaSuccess) ms = 0.0f;
        const std::string p = strip_step(d.path);
        Row& r = rows[p];
        r.ms += ms;
        ++r.calls;
        if (p == "step") ++steps;
        const size_t o = p.rfind("/optimizer ");
        if (o != std::string::npos) {
            const std::string leaf = p.substr(o + 1);  // "optimizer <tier> <tensor>"
            const size_t sp = leaf.find(' ', std::strlen("optimizer "));
            if (sp != std::string::npos) {
                Row& t = tiers[leaf.substr(0, sp)];
                t.ms += ms;
                ++t.calls;
            }
        }
        s.pool.push_back(d.start);
        s.pool.push_back(d.end);
    }
    s.done.clear();
    cudaGetLastError();
    FILE* f = s.out == "-" ? stderr : std::fopen(s.out.c_str(), "w");
    if (!f) return;
    const double per = steps > 0 ? double(steps) : 1.0;
    std::fprintf(f, "# NVTX range times (GPU timeline between each range's ends), %ld profiled step(s)\n", steps);
    std::fprintf(f, "%-64s\t%8s\t%12s\n", "range", "calls", "ms_per_step");
    for (const auto& [p, r] : rows) std::fprintf(f, "%-64s\t%8ld\t%12.3f\n", p.c_str(), r.calls, r.ms / per);
    for (const auto& [t, r] : tiers)
        std::fprintf(f, "%-64s\t%8ld\t%12.3f\n", ("tier total: " + t).c_str(), r.calls, r.ms / per);
    if (f != stderr) std::fclose(f);
}

}  // namespace range_times
#endif

/// RAII NVTX range: pushed by the constructor, popped by the destructor (same thread). The name is
/// copied by NVTX, so a temporary string's c_str() is fine.
struct NvtxRange {
#if defined(SKEW_HAVE_NVTX)
    explicit NvtxRange(const char* name) {
        nvtxRangePushA(name);
        range_times::push(name);
    }
    ~NvtxRange() {
        range_times::pop();
        nvtxRangePop();
    }
#else
    explicit NvtxRange(const char*) {}
#endif
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

/// Start / stop the profiler's capture range (`nsys profile --capture-range=cudaProfilerApi`,
/// `ncu --profile-from-start off`) and the ranges' self-timing (SKEW_RANGE_TIMES): the trainer's
/// --profile-steps A:B calls start before step A and stop after step B.
#if defined(SKEW_HAVE_NVTX)
inline void profiler_start() {
    range_times::start();
    cudaProfilerStart();
}
inline void profiler_stop() {
    cudaProfilerStop();
    range_times::stop();
}
#else
inline void profiler_start() {}
inline void profiler_stop() {}
#endif

}  // namespace skew::cuda

#define SKEW_NVTX_CONCAT2(a, b) a##b
#define SKEW_NVTX_CONCAT(a, b) SKEW_NVTX_CONCAT2(a, b)
/// A range named `name` covering the rest of the enclosing scope.
#define SKEW_NVTX_RANGE(name) ::skew::cuda::NvtxRange SKEW_NVTX_CONCAT(skew_nvtx_range_, __LINE__)(name)
/// A range named after the enclosing function (llm.c's NVTX_RANGE_FN).
#define SKEW_NVTX_RANGE_FN() SKEW_NVTX_RANGE(__func__)
