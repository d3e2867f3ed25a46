// CUDA device queries: how many GPUs the runtime sees (0 without a driver) and their names.
#pragma once
#include <string>

namespace skew::cuda {

/// Number of CUDA devices visible; 0 when there is no GPU or no driver (never throws).
int device_count();

/// The device's marketing name (e.g. "NVIDIA H200"), "unknown" on failure.
std::string device_name(int device);

}  // namespace skew::cuda
