// CUDA device queries shared by the CUDA backend: whether a usable GPU is present and its name.
#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"

namespace skew::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" / "no driver" error
        return 0;
    }
    return n;
}

std::string device_name(int device) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown";
    return prop.name;
}

}  // namespace skew::cuda
