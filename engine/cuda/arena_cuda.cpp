// The arena on the GPU (host code calling the CUDA runtime): one cudaMalloc of the plan's peak, zeroed; a clear error with the plan's
// numbers when there is no GPU or too little free memory.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "engine/arena.h"
#include "engine/error.h"

namespace skew {

void free_cuda_arena(char* base) { cudaFree(base); }

Arena allocate_cuda_arena(const MemoryPlan& plan) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        fail("arena: no CUDA device is available for the {:.2f} GiB plan of optimizer '{}'; use the CPU backend "
             "(skew train: runtime.backend=cpu; skew eval and skew sample: --backend cpu)",
             double(plan.peak_bytes) / GIB, plan.optimizer);
    }
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    Arena a;
    a.device = ArenaDevice::CUDA;
    a.bytes = plan.peak_bytes;
    a.plan = &plan;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, size_t(plan.peak_bytes));
    if (err != cudaSuccess) {
        cudaGetLastError();
        fail("arena: cudaMalloc of {:.2f} GiB failed ({}); the device has {:.2f} GiB free of {:.2f} GiB. "
             "--> HINT: free the device (other processes: nvidia-smi), or see what fits with `skew plan CONFIG --budget GIB`",
             double(plan.peak_bytes) / GIB, cudaGetErrorString(err), double(free_b) / GIB, double(total_b) / GIB);
    }
    cudaMemset(p, 0, size_t(plan.peak_bytes));
    a.base = static_cast<char*>(p);
    for (size_t i = 0; i < plan.buffers.size(); ++i) a.index.emplace(plan.buffers[i].name, int(i));
    return a;
}

int64_t cuda_device_used_bytes() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return int64_t(total_b) - int64_t(free_b);
}

int64_t cuda_device_free_bytes() {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return int64_t(free_b);
}

}  // namespace skew
