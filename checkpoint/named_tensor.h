// Named tensors: a plan buffer (or any host or device memory) with the name, dtype and shape a
// safetensors file stores or a message prints, and the copies between it and host memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "kernels/backend.h"

namespace skew {

/// A named tensor in host or device memory: what a safetensors file stores or a fault check scans.
struct NamedTensor {
    std::string name;  // name in the file / in messages
    DType dtype = DType::F32;
    std::vector<int64_t> shape;  // row-major
    void* data = nullptr;        // host pointer, or device pointer when device == CUDA
    ArenaDevice device = ArenaDevice::HOST;
    Backend* backend = nullptr;  // copies device memory (Backend::copy_to_host/_device); needed when device != HOST

    int64_t numel() const;
    int64_t bytes() const { return numel() * dtype_bytes(dtype); }
};

/// The weights of an arena as tensors named by the parameter table ("blocks.1.moe.router"), in
/// table order: the plan's "weight.<param>" buffers with the prefix removed. `backend` copies a
/// device arena's memory (nullptr for a host arena).
std::vector<NamedTensor> weight_tensors(const Arena& arena, Backend* backend = nullptr);

/// The plan buffers of one kind (GRAD, STATE, ...), named exactly as the plan names them
/// ("grad.<param>", "state.<param>.<kind>"), in plan order; `backend` as for weight_tensors.
std::vector<NamedTensor> buffer_tensors(const Arena& arena, BufferKind kind, Backend* backend = nullptr);

/// Copy `bytes` bytes starting `offset` bytes into t's data to host memory dst (t.backend's
/// copy_to_host for device memory). Throws skew::Error naming the tensor on a range outside it, a
/// device tensor without a backend, or a failed copy.
void copy_tensor_to_host(void* dst, const NamedTensor& t, int64_t offset, int64_t bytes);

/// The reverse: host memory src into t's data at `offset`.
void copy_tensor_from_host(const NamedTensor& t, int64_t offset, const void* src, int64_t bytes);

/// "[2, 3]": a shape or a multi-index (an element's coordinates) as error messages print it.
std::string shape_text(const std::vector<int64_t>& s);

}  // namespace skew
