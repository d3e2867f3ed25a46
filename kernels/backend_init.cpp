// The host defaults of Backend: init_normal draws on the host in chunks (OpenMP), rounds and copies
// to the backend (the CUDA backend overrides it with a kernel, kernels/cuda/init_kernels.cu);
// allocate_device_memory refuses on a backend without device memory.
#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "kernels/backend.h"
#include "kernels/common/bf16.h"
#include "kernels/common/init_math.h"

namespace skew {

void Backend::init_normal(TensorRef x, int64_t n, uint64_t seed, uint32_t tensor, float std) {
    constexpr int64_t CHUNK = int64_t(1) << 24;  // elements drawn per copy (64 MiB of fp32)
    const bool bf = x.type == ScalarType::BF16;
    std::vector<float> f32(bf ? 0 : size_t(std::min(n, CHUNK)));
    std::vector<bf16> b16(bf ? size_t(std::min(n, CHUNK)) : 0);
    for (int64_t base = 0; base < n; base += CHUNK) {
        const int64_t m = std::min(CHUNK, n - base);
#pragma omp parallel for schedule(static) if (m > (int64_t(1) << 16))
        for (int64_t i = 0; i < m; ++i) {
            const float v = init_normal_value(seed, tensor, uint64_t(base + i), std);
            if (bf) b16[size_t(i)] = f32_to_bf16(v);
            else f32[size_t(i)] = v;
        }
        if (bf) copy_to_device(static_cast<bf16*>(x.data) + base, b16.data(), m * int64_t(sizeof(bf16)));
        else copy_to_device(static_cast<float*>(x.data) + base, f32.data(), m * int64_t(sizeof(float)));
    }
}

void* Backend::allocate_device_memory(int64_t bytes, const std::string& what) {
    fail("backend {}: {} asks for {} bytes of device memory, but this backend keeps its memory on the host", name(),
         what, bytes);
}

}  // namespace skew
