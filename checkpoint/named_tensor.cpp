// Named tensors over an arena and their copies to and from host memory (checkpoint/named_tensor.h).
#include "checkpoint/named_tensor.h"

#include <cstring>

#include "engine/error.h"

namespace skew {

namespace {

int64_t product(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
}

void check_range(const NamedTensor& t, int64_t offset, int64_t bytes) {
    if (offset < 0 || bytes < 0 || offset + bytes > t.bytes())
        fail("tensor '{}': byte range [{}, {}) outside its {} bytes", t.name, offset, offset + bytes, t.bytes());
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

int64_t NamedTensor::numel() const { return product(shape); }

std::vector<NamedTensor> buffer_tensors(const Arena& arena, BufferKind kind, Backend* backend) {
    if (!arena.plan) fail("checkpoint: the arena has no memory plan");
    std::vector<NamedTensor> out;
    const auto& bufs = arena.plan->buffers;
    for (size_t i = 0; i < bufs.size(); ++i) {
        if (bufs[i].kind != kind) continue;
        out.push_back(
            NamedTensor{bufs[i].name, bufs[i].dtype, bufs[i].shape, arena.ptr(int(i)), arena.device, backend});
    }
    return out;
}

std::vector<NamedTensor> weight_tensors(const Arena& arena, Backend* backend) {
    std::vector<NamedTensor> out = buffer_tensors(arena, BufferKind::WEIGHT, backend);
    for (auto& t : out) t.name = param_of_weight_buffer(t.name);
    return out;
}

void copy_tensor_to_host(void* dst, const NamedTensor& t, int64_t offset, int64_t bytes) {
    check_range(t, offset, bytes);
    const char* src = static_cast<const char*>(t.data) + offset;
    if (t.device == ArenaDevice::HOST) {
        std::memcpy(dst, src, size_t(bytes));
        return;
    }
    if (!t.backend) fail("tensor '{}' is in device memory and no backend was given to copy it", t.name);
    try {
        t.backend->copy_to_host(dst, src, bytes);
    } catch (const Error& e) {
        fail("tensor '{}': copy from the device failed: {}", t.name, e.what());
    }
}

void copy_tensor_from_host(const NamedTensor& t, int64_t offset, const void* src, int64_t bytes) {
    check_range(t, offset, bytes);
    char* dst = static_cast<char*>(t.data) + offset;
    if (t.device == ArenaDevice::HOST) {
        std::memcpy(dst, src, size_t(bytes));
        return;
    }
    if (!t.backend) fail("tensor '{}' is in device memory and no backend was given to copy it", t.name);
    try {
        t.backend->copy_to_device(dst, src, bytes);  // returns once src may be reused
    } catch (const Error& e) {
        fail("tensor '{}': copy to the device failed: {}", t.name, e.what());
    }
}

}  // namespace skew
