// The backends the op table runs on: the CPU reference always, the CUDA backend when the binary is
// built with it and a device is visible (backends_cuda.cpp), each with the copy-bandwidth probe
// its roofline uses; and backend memory for a case's tensors.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace skew::ops {

struct BackendEntry {
    std::string name;
    std::unique_ptr<Backend> be;
    /// Seconds of one copy of `bytes` bytes between two buffers of backend memory (memcpy on the
    /// CPU: the faster of one thread's and one slice per OpenMP thread; a device-to-device copy on
    /// CUDA), after a warm-up; the roofline's bandwidth.
    std::function<double(Backend&, void* dst, const void* src, int64_t bytes)> copy_seconds;
};

/// The backends present: CPU first, then CUDA (compiled in and a device visible).
std::vector<BackendEntry> present_backends();
/// Names of the backends compiled into this binary ("cpu", "cuda").
std::vector<std::string> compiled_backends();
/// Why a compiled backend is absent ("" when present): e.g. "no CUDA device visible".
std::string backend_absent_reason(const std::string& name);

#ifdef SKEW_BACKEND_OPS_CUDA
void add_cuda_backend(std::vector<BackendEntry>& out);  // backends_cuda.cpp
std::string cuda_absent_reason();
#endif

/// `bytes` bytes of a backend's memory (device memory when be.device_memory(), else 64-byte aligned
/// host memory), freed when the object goes.
class BackendMemory {
public:
    BackendMemory(Backend& be, int64_t bytes);
    ~BackendMemory();
    BackendMemory(const BackendMemory&) = delete;
    BackendMemory& operator=(const BackendMemory&) = delete;
    void* get() const { return p_; }

private:
    Backend& be_;
    void* p_ = nullptr;
};

}  // namespace skew::ops
