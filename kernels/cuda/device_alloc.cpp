// Counted cudaMalloc / cudaMallocHost of the CUDA backend (device_alloc.h). Host code.
#include "kernels/cuda/device_alloc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/cuda_check.h"

namespace skew::cuda {

namespace {
std::atomic<int64_t> g_device_count{0}, g_device_bytes{0}, g_pinned_count{0}, g_pinned_bytes{0};
}  // namespace

void* device_alloc(int64_t bytes, const char* what) {
    check_nonneg(what, bytes);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, size_t(std::max<int64_t>(1, bytes)));
    if (err != cudaSuccess) throw_cuda_error(__FILE__, __LINE__, what, err);
    g_device_count.fetch_add(1);
    g_device_bytes.fetch_add(bytes);
    return p;
}

void device_free(void* p) {
    if (p) cudaFree(p);
}

void* pinned_host_alloc(int64_t bytes, const char* what) {
    check_nonneg(what, bytes);
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, size_t(std::max<int64_t>(1, bytes)));
    if (err != cudaSuccess) throw_cuda_error(__FILE__, __LINE__, what, err);
    g_pinned_count.fetch_add(1);
    g_pinned_bytes.fetch_add(bytes);
    return p;
}

void pinned_host_free(void* p) {
    if (p) cudaFreeHost(p);
}

BackendAllocStats backend_alloc_stats() {
    BackendAllocStats s;
    s.device_count = g_device_count.load();
    s.device_bytes = g_device_bytes.load();
    s.pinned_count = g_pinned_count.load();
    s.pinned_bytes = g_pinned_bytes.load();
    return s;
}

}  // namespace skew::cuda
