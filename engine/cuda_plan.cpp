// The backend a plan is sized for and the CUDA runtime's memory outside the arena (device-free
// constants of the memory plan; the backends' workspace sums are plan/backend_workspace.cpp).
#include "engine/memory_plan.h"

namespace skew {

BackendChoice plan_backend(const Config& cfg) {
    return cfg.runtime.backend == BackendChoice::CPU ? BackendChoice::CPU : BackendChoice::CUDA;
}

int64_t cuda_runtime_overhead_bytes(int cuda_major) {
    (void)cuda_major;  // only CUDA 13 is measured (H200, paper model): 0.77 GiB
    return int64_t(0.77 * 1024.0 * 1024.0 * 1024.0);
}

int cuda_plan_major_version() {
#ifndef SKEW_CUDA_MAJOR
#define SKEW_CUDA_MAJOR 13  // built without the toolkit: the one version measured
#endif
    return SKEW_CUDA_MAJOR;
}

}  // namespace skew
