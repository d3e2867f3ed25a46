// GPU test helpers: skip with a message when no CUDA device is visible, device buffers that copy
// to and from host vectors, and the one shared CUDA backend. Every GPU test runs an op on the CPU
// backend and on the CUDA backend with the same inputs and compares by normalized MSE
// (tests/kernels/harness.h) against a stated per-op limit.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_info.h"
#include "tests/kernels/harness.h"

namespace skew::test {

/// Skip the current test (Catch2 v2: WARN and return) when no CUDA device is visible. A backstop:
/// without a device test_gpu's main (gpu_main.cpp) already exits 77, which ctest reports as skipped.
#define SKEW_REQUIRE_GPU()                                                                                \
    do {                                                                                                  \
        if (skew::cuda::device_count() == 0) {                                                            \
            WARN("no CUDA device visible: GPU test skipped (runs on a GPU machine: bench/gpu_check.sh)"); \
            return;                                                                                       \
        }                                                                                                 \
    } while (0)

/// Return from a GPU test that launches `mpirun` when the machine has no Open MPI launcher (a GPU
/// machine with carried binaries may lack it): a warning names what was not run.
#define SKEW_REQUIRE_MPIRUN()                                                                     \
    do {                                                                                          \
        if (std::system("command -v mpirun >/dev/null 2>&1") != 0) {                              \
            WARN("mpirun not found: this NCCL training test needs Open MPI's launcher; skipped"); \
            return;                                                                               \
        }                                                                                         \
    } while (0)

/// The CUDA backend shared by all GPU tests of the executable (created on first use).
inline cuda::CudaBackend& gpu() {
    static std::unique_ptr<cuda::CudaBackend> be = std::make_unique<cuda::CudaBackend>(0);
    return *be;
}

/// A device copy of a host vector; get() synchronizes the backend (and checks its error word).
template <class T>
struct Dev {
    T* p = nullptr;
    size_t n = 0;
    explicit Dev(size_t count) : n(count) {
        cuda_check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)));
        cuda_check(cudaMemset(p, 0, std::max<size_t>(1, n) * sizeof(T)));
    }
    explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
        if (n) cuda_check(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    }
    ~Dev() { cudaFree(p); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    std::vector<T> get() const {
        gpu().synchronize();
        std::vector<T> h(n);
        if (n) cuda_check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
};

/// Widen for comparison.
inline std::vector<float> f32(const std::vector<bf16>& v) { return to_f32(v); }
inline std::vector<float> f32(const std::vector<float>& v) { return v; }

/// Require the GPU result to be finite and within `limit` normalized MSE of the CPU result, with
/// the absolute floor `atol` (require_nmse in tests/kernels/harness.h).
template <class A, class B>
void require_close(const std::string& name, const std::vector<A>& gpu_out, const std::vector<B>& cpu_out, double limit,
                   double atol = DEFAULT_ATOL) {
    const auto g = f32(gpu_out), c = f32(cpu_out);
    require_nmse(name, g, c, limit, atol);
}

/// Require two results to be bit-identical (memcmp of their bytes), reporting how many elements
/// differ: what a "bit for bit" or "deterministic" claim means.
template <class T>
void require_bitwise_equal(const std::string& name, const std::vector<T>& a, const std::vector<T>& b) {
    REQUIRE(a.size() == b.size());
    int64_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
    INFO(name << ": " << differ << " of " << a.size() << " elements differ bitwise");
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
    CHECK(differ == 0);
}

/// bf16 vector of n values uniform in [lo, hi).
inline std::vector<bf16> random_bf16(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    return to_bf16(random_vector(n, seed, lo, hi));
}

}  // namespace skew::test
