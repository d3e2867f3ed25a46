// NVTX ranges (header-only nvtx3) so Nsight Systems shows every phase by name: forward and backward
// per block, optimizer per tier. `SKEW_NVTX_RANGE("block 1 moe forward");` pushes now, pops at scope
// end. Safe to include from code built without CUDA: where the nvtx3 / CUDA headers are not on the
// include path (a target that does not link CUDA::cudart), every range and profiler call is a no-op.
#pragma once

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>) && __has_include(<cuda_profiler_api.h>)
#define SKEW_HAVE_NVTX 1
#endif
#endif

#if defined(SKEW_HAVE_NVTX)
#include <cuda_profiler_api.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace skew::cuda {

/// RAII NVTX range: pushed by the constructor, popped by the destructor (same thread). The name is
/// copied by NVTX, so a temporary string's c_str() is fine.
struct NvtxRange {
#if defined(SKEW_HAVE_NVTX)
    explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
    ~NvtxRange() { nvtxRangePop(); }
#else
    explicit NvtxRange(const char*) {}
#endif
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;
};

/// Start / stop the profiler's capture range (`nsys profile --capture-range=cudaProfilerApi`):
/// the trainer's --profile-steps A:B calls start before step A and stop after step B.
#if defined(SKEW_HAVE_NVTX)
inline void profiler_start() { cudaProfilerStart(); }
inline void profiler_stop() { cudaProfilerStop(); }
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
