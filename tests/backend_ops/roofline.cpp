// The measured roofline of a backend (tests/backend_ops/roofline.h).
#include "tests/backend_ops/roofline.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace skew::ops {

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

Roofline measure_roofline(BackendEntry& b) {
    Backend& be = *b.be;
    Roofline r;
    // GEMM: fp32 2048^3 on the CPU (OpenBLAS sgemm: its fastest dtype), bf16 8192^3 on a GPU (tensor cores).
    const bool gpu = be.device_memory();
    const int64_t n = gpu ? 8192 : 2048;
    const ScalarType t = gpu ? ScalarType::BF16 : ScalarType::F32;
    const int64_t bytes = n * n * scalar_type_bytes(t);
    BackendMemory a(be, bytes), bm(be, bytes), c(be, n * n * 4);
    be.init_normal(TensorRef(a.get(), t), n * n, 1, 1, 1.0f);
    be.init_normal(TensorRef(bm.get(), t), n * n, 1, 2, 1.0f);
    const MatmulShape s{n, n, n, false, false, 1.0f, 0.0f};
    be.matmul(TensorRef(static_cast<float*>(c.get())), ConstTensorRef(a.get(), t), ConstTensorRef(bm.get(), t), s);
    be.synchronize();
    double best = 1e30;
    for (int rep = 0; rep < (gpu ? 5 : 2); ++rep) {
        const double t0 = now();
        be.matmul(TensorRef(static_cast<float*>(c.get())), ConstTensorRef(a.get(), t), ConstTensorRef(bm.get(), t), s);
        be.synchronize();
        best = std::min(best, now() - t0);
    }
    r.flops_per_s = 2.0 * double(n) * double(n) * double(n) / best;
    r.gemm = std::string(t == ScalarType::BF16 ? "bf16" : "f32") + " matmul " + std::to_string(n) + "^3";
    // Copy: 256 MiB (CPU memcpy) or 1 GiB (device to device); best of 3.
    const int64_t cb = gpu ? (int64_t(1) << 30) : (int64_t(256) << 20);
    BackendMemory src(be, cb), dst(be, cb);
    double cbest = 1e30;
    for (int rep = 0; rep < 3; ++rep) cbest = std::min(cbest, b.copy_seconds(be, dst.get(), src.get(), cb));
    r.bytes_per_s = 2.0 * double(cb) / cbest;
    r.copy = std::string(gpu ? "device copy " : "memcpy ") + std::to_string(cb >> 20) + " MiB (read + write)";
    return r;
}

double roofline_fraction(const Roofline& r, double flops, double bytes, double seconds) {
    const double roof = std::max(flops / r.flops_per_s, bytes / r.bytes_per_s);
    return seconds > 0.0 ? roof / seconds : 0.0;
}

}  // namespace skew::ops
