// Finite and zero checks over named buffers: bit tests on the exponent field, bf16 and fp32
// (checkpoint/tensor_scan.h).
#include "checkpoint/tensor_scan.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace skew {

namespace {

constexpr int64_t SCAN_CHUNK = int64_t(16) << 20;  // bytes staged per device copy

std::vector<int64_t> unravel(int64_t index, const std::vector<int64_t>& shape) {
    std::vector<int64_t> c(shape.size(), 0);
    for (size_t d = shape.size(); d-- > 0;) {
        if (shape[d] > 0) {
            c[d] = index % shape[d];
            index /= shape[d];
        }
    }
    return c;
}

// First non-finite element of n elements at p, or -1.
int64_t scan(const void* p, int64_t n, DType t, double* value) {
    if (t == DType::BF16) {
        const uint16_t* u = static_cast<const uint16_t*>(p);
        for (int64_t i = 0; i < n; ++i)
            if ((u[i] & 0x7f80u) == 0x7f80u) {
                *value = double(std::bit_cast<float>(uint32_t(u[i]) << 16));
                return i;
            }
    } else if (t == DType::F32) {
        const uint32_t* u = static_cast<const uint32_t*>(p);
        for (int64_t i = 0; i < n; ++i)
            if ((u[i] & 0x7f800000u) == 0x7f800000u) {
                *value = double(std::bit_cast<float>(u[i]));
                return i;
            }
    }
    return -1;
}

}  // namespace

std::optional<NonFinite> first_non_finite(const std::vector<NamedTensor>& tensors) {
    std::vector<char> staging;
    for (const auto& t : tensors) {
        if (t.dtype != DType::BF16 && t.dtype != DType::F32) continue;
        const int64_t esize = dtype_bytes(t.dtype), n = t.numel();
        double value = 0;
        if (t.device == ArenaDevice::HOST) {
            int64_t i = scan(t.data, n, t.dtype, &value);
            if (i >= 0) return NonFinite{t.name, i, unravel(i, t.shape), value};
            continue;
        }
        const int64_t per_chunk = SCAN_CHUNK / esize;
        staging.resize(size_t(std::min(n, per_chunk) * esize));
        for (int64_t start = 0; start < n; start += per_chunk) {
            const int64_t m = std::min(per_chunk, n - start);
            copy_tensor_to_host(staging.data(), t, start * esize, m * esize);
            int64_t i = scan(staging.data(), m, t.dtype, &value);
            if (i >= 0) return NonFinite{t.name, start + i, unravel(start + i, t.shape), value};
        }
    }
    return std::nullopt;
}

std::vector<std::string> all_zero_tensors(const std::vector<NamedTensor>& tensors) {
    std::vector<std::string> out;
    std::vector<char> staging;
    auto nonzero = [](const char* p, int64_t n, DType t) {
        const int64_t esize = dtype_bytes(t);
        for (int64_t i = 0; i < n; ++i) {
            uint32_t bits = 0;
            std::memcpy(&bits, p + i * esize, size_t(esize));
            if ((t == DType::BF16 ? (bits & 0x7fffu) : (bits & 0x7fffffffu)) != 0) return true;
        }
        return false;
    };
    for (const auto& t : tensors) {
        if (t.dtype != DType::BF16 && t.dtype != DType::F32) continue;
        const int64_t esize = dtype_bytes(t.dtype), n = t.numel();
        bool any = false;
        if (t.device == ArenaDevice::HOST) {
            any = nonzero(static_cast<const char*>(t.data), n, t.dtype);
        } else {
            const int64_t per_chunk = SCAN_CHUNK / esize;
            staging.resize(size_t(std::min(n, per_chunk) * esize));
            for (int64_t start = 0; start < n && !any; start += per_chunk) {
                const int64_t m = std::min(per_chunk, n - start);
                copy_tensor_to_host(staging.data(), t, start * esize, m * esize);
                any = nonzero(staging.data(), m, t.dtype);
            }
        }
        if (!any && n > 0) out.push_back(t.name);
    }
    return out;
}

}  // namespace skew
