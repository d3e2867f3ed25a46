// Every device (and pinned host) allocation the CUDA backend makes for itself, through one counter:
// the arena (CudaBackend::allocate_device_memory, kernels/cuda/cuda_backend.cpp) holds everything a training step needs, so a step must not
// add to these counts (tests/gpu/test_train_step.cpp asserts it). Usable from .cu and .cpp files.
#pragma once
#include <cstdint>

namespace skew::cuda {

/// Allocations made through device_alloc / pinned_host_alloc since the process started (never
/// decreases on free): how many, and their bytes.
struct BackendAllocStats {
    int64_t device_count = 0;
    int64_t device_bytes = 0;
    int64_t pinned_count = 0;
    int64_t pinned_bytes = 0;
};

/// cudaMalloc of `bytes` (>= 1 used for 0) counted in backend_alloc_stats(); `what` names the
/// buffer in the error (skew::Error with an out-of-memory hint when it fails).
void* device_alloc(int64_t bytes, const char* what);
/// cudaFree (null is a no-op; errors ignored, as in destructors).
void device_free(void* p);
/// cudaMallocHost (page-locked host memory) of `bytes`, counted; `what` names it in the error.
void* pinned_host_alloc(int64_t bytes, const char* what);
/// cudaFreeHost (null is a no-op).
void pinned_host_free(void* p);

/// The counts so far (thread-safe).
BackendAllocStats backend_alloc_stats();

}  // namespace skew::cuda
