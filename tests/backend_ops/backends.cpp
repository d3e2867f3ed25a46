// The backends present to the op table and their memory (tests/backend_ops/backends.h).
#include "tests/backend_ops/backends.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace skew::ops {

namespace {
// memcpy of the buffer in one contiguous slice per OpenMP thread (the threads the CPU backend's ops
// use), so the roofline's bandwidth is the machine's, not one core's.
void parallel_memcpy(void* dst, const void* src, int64_t bytes) {
#pragma omp parallel
    {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t lo = bytes * t / nt, hi = bytes * (t + 1) / nt;
        std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, size_t(hi - lo));
    }
}

// The faster of one thread's memcpy (glibc streams big copies) and the per-thread slices.
double cpu_copy_seconds(Backend&, void* dst, const void* src, int64_t bytes) {
    parallel_memcpy(dst, src, bytes);  // warm-up: pages touched
    auto t0 = std::chrono::steady_clock::now();
    parallel_memcpy(dst, src, bytes);
    const double threaded = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    std::memcpy(dst, src, size_t(bytes));
    const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return std::min(threaded, one);
}
}  // namespace

std::vector<BackendEntry> present_backends() {
    std::vector<BackendEntry> out;
    out.push_back(BackendEntry{"cpu", make_cpu_backend(), cpu_copy_seconds});
#ifdef SKEW_BACKEND_OPS_CUDA
    add_cuda_backend(out);
#endif
    return out;
}

std::vector<std::string> compiled_backends() {
#ifdef SKEW_BACKEND_OPS_CUDA
    return {"cpu", "cuda"};
#else
    return {"cpu"};
#endif
}

std::string backend_absent_reason(const std::string& name) {
    if (name == "cpu") return "";
#ifdef SKEW_BACKEND_OPS_CUDA
    if (name == "cuda") return cuda_absent_reason();
#endif
    return "not compiled in";
}

BackendMemory::BackendMemory(Backend& be, int64_t bytes) : be_(be) {
    const int64_t n = std::max<int64_t>(64, (bytes + 63) / 64 * 64);
    if (be.device_memory()) p_ = be.allocate_device_memory(n, "a backend_ops tensor");
    else {
        p_ = std::aligned_alloc(64, size_t(n));
        std::memset(p_, 0, size_t(n));
    }
}

BackendMemory::~BackendMemory() {
    if (be_.device_memory()) be_.free_device_memory(p_);
    else std::free(p_);
}

}  // namespace skew::ops
