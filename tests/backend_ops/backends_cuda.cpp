// The CUDA backend for the op table (built when the binary is built with CUDA): present when a device
// is visible; its roofline's bandwidth is a device-to-device copy on the backend's stream.
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "tests/backend_ops/backends.h"

namespace skew::ops {

namespace {
double cuda_copy_seconds(Backend& be, void* dst, const void* src, int64_t bytes) {
    auto stream = static_cast<cudaStream_t>(be.cuda_stream());
    cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream));  // warm-up
    cudaEvent_t a, b;
    cuda_check(cudaEventCreate(&a));
    cuda_check(cudaEventCreate(&b));
    cuda_check(cudaEventRecord(a, stream));
    cuda_check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream));
    cuda_check(cudaEventRecord(b, stream));
    cuda_check(cudaEventSynchronize(b));
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return double(ms) * 1e-3;
}
}  // namespace

void add_cuda_backend(std::vector<BackendEntry>& out) {
    if (cuda::device_count() == 0) return;
    out.push_back(BackendEntry{"cuda", std::make_unique<cuda::CudaBackend>(0), cuda_copy_seconds});
}

std::string cuda_absent_reason() { return cuda::device_count() == 0 ? "no CUDA device visible" : ""; }

}  // namespace skew::ops
