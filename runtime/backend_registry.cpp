// The backends and their device communicators (runtime/backend_registry.h).
#include "runtime/backend_registry.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "engine/config_hint.h"
#include "engine/error.h"

#if defined(SKEW_HAVE_CUDA)
#include "dist/nccl_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#endif

namespace skew {

std::unique_ptr<Backend> make_backend(const Config& cfg, int device, const std::string& resume_run) {
    const BackendChoice b = cfg.runtime.backend;
    // the CPU backend instead: the config's change, or a new run under --resume
    if (b == BackendChoice::CPU) return make_cpu_backend();
    const auto cpu = [&] {
        return resume_run.empty() ? std::string("use runtime.backend=cpu (or auto, which falls back to the CPU)")
                                  : config_change_hint(cfg, "runtime.backend", "cpu", resume_run);
    };
#if defined(SKEW_HAVE_CUDA)
    const int n_devices = cuda::device_count();
    if (b == BackendChoice::CUDA) {
        if (n_devices == 0)
            fail(
                "{}: runtime.backend: cuda, but no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES "
                "hides it; see nvidia-smi)\n--> HINT: {}{}",
                cfg.source, resume_run.empty() ? "" : "resume where a CUDA device is visible, or ", cpu());
        if (device >= n_devices)
            fail(
                "{}: runtime.backend: cuda: this rank needs CUDA device {} (its local rank) but {} device(s) are "
                "visible; "
                "start at most as many ranks per node as GPUs",
                cfg.source, device, n_devices);
        return cuda::make_cuda_backend(device);
    }
    if (b == BackendChoice::AUTO) {
        if (n_devices > device) return cuda::make_cuda_backend(device);
        if (n_devices > 0)
            fail(
                "{}: runtime.backend: auto: this rank needs CUDA device {} (its local rank) but {} device(s) are "
                "visible; start at most as many ranks per node as GPUs",
                cfg.source, device, n_devices);
        spdlog::info("runtime.backend: auto: no CUDA device visible, training on the CPU backend");
        return make_cpu_backend();
    }
#else
    if (b == BackendChoice::CUDA)
        fail(
            "{}: runtime.backend: cuda, but this skew was built without the CUDA backend (-DSKEW_CUDA=OFF or no nvcc)"
            "\n--> HINT: rebuild with -DSKEW_CUDA=ON, or {}",
            cfg.source, cpu());
    if (b == BackendChoice::AUTO) return make_cpu_backend();
    (void)device;
#endif
    fail("{}: runtime.backend: no backend '{}' in this build", cfg.source, b);
}

std::unique_ptr<Backend> make_named_backend(const std::string& name) {
    const std::optional<BackendChoice> b = parse_choice<BackendChoice>(name);
    if (!b) fail("--backend {}: unknown backend (expected {})", name, choice_list<BackendChoice>());
    if (*b == BackendChoice::CPU) return make_cpu_backend();
#if defined(SKEW_HAVE_CUDA)
    const int n = cuda::device_count();
    if (*b == BackendChoice::CUDA) {
        if (n == 0) fail("--backend cuda: no CUDA device is visible (see nvidia-smi)\n--> HINT: use --backend cpu");
        return cuda::make_cuda_backend(0);
    }
    return n > 0 ? cuda::make_cuda_backend(0) : make_cpu_backend();
#else
    if (*b == BackendChoice::CUDA)
        fail("--backend cuda: this skew was built without the CUDA backend\n--> HINT: use --backend cpu");
    return make_cpu_backend();
#endif
}

BackendChoice backend_choice_of(const Backend& backend) {
    return backend.runs_cuda() ? BackendChoice::CUDA : BackendChoice::CPU;
}

std::unique_ptr<Communicator> make_device_communicator(Backend& backend, Communicator& host, int device) {
#if defined(SKEW_HAVE_CUDA)
    if (backend.runs_cuda()) return make_nccl_communicator(host, device, backend.cuda_stream());
#else
    (void)host;
    (void)device;
#endif
    if (backend.device_memory()) fail("{} backend: no device communicator for it", backend.name());
    return nullptr;
}

}  // namespace skew
