// The backends, their device communicators and optimizer steps (runtime/backend_registry.h).
#include "runtime/backend_registry.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "engine/config_hint.h"
#include "engine/error.h"

#if defined(SKEW_HAVE_CUDA)
#include "dist/nccl_communicator.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_info.h"
#include "optim/optimizer_runner_cuda.h"
#endif

namespace skew {

namespace {

/// Where a backend choice came from, for its errors: "FILE: " (or ""), the choice as written
/// ("runtime.backend: cuda", "--backend cuda"), how to move to the CPU instead, and what to say
/// first to a resumed run.
struct ChoiceSource {
    std::string where;
    std::string choice;
    std::string cpu_hint;
    std::string resume_prefix;
};

/// The one device selection: the CPU backend, or the CUDA backend on `device` (this rank's local
/// rank). `auto` takes the GPU when one is visible for the rank and falls back to the CPU when
/// none is. Errors (skew::Error): cuda with no device or no CUDA in the build, and fewer visible
/// devices than the rank needs.
std::unique_ptr<Backend> select_backend(BackendChoice b, int device, const ChoiceSource& src) {
    if (b == BackendChoice::CPU) return make_cpu_backend();
#if defined(SKEW_HAVE_CUDA)
    const int n_devices = cuda::device_count();
    if (b == BackendChoice::CUDA && n_devices == 0)
        fail(
            "{}{}, but no CUDA device is visible (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it; see "
            "nvidia-smi)\n--> HINT: {}{}",
            src.where, src.choice, src.resume_prefix.empty() ? "" : src.resume_prefix, src.cpu_hint);
    if (n_devices > device) return cuda::make_cuda_backend(device);
    if (n_devices > 0)
        fail(
            "{}{}: this rank needs CUDA device {} (its local rank) but {} device(s) are visible; start at most as "
            "many ranks per node as GPUs",
            src.where, src.choice, device, n_devices);
    spdlog::info("{}: no CUDA device visible, running on the CPU backend", src.choice);
    return make_cpu_backend();
#else
    if (b == BackendChoice::CUDA)
        fail(
            "{}{}, but this skew was built without the CUDA backend (-DSKEW_CUDA=OFF or no nvcc)\n--> HINT: rebuild "
            "with -DSKEW_CUDA=ON, or {}",
            src.where, src.choice, src.cpu_hint);
    (void)device;
    return make_cpu_backend();
#endif
}

}  // namespace

std::unique_ptr<Backend> make_backend(const Config& cfg, int device, const std::string& resume_run) {
    ChoiceSource src;
    src.where = cfg.source + ": ";
    src.choice = fmt::format("runtime.backend: {}", cfg.runtime.backend);
    // the CPU backend instead: the config's change, or a new run under --resume
    src.cpu_hint = resume_run.empty() ? std::string("use runtime.backend=cpu (or auto, which falls back to the CPU)")
                                      : config_change_hint(cfg, "runtime.backend", "cpu", resume_run);
    if (!resume_run.empty()) src.resume_prefix = "resume where a CUDA device is visible, or ";
    return select_backend(cfg.runtime.backend, device, src);
}

std::unique_ptr<Backend> make_named_backend(const std::string& name) {
    const std::optional<BackendChoice> b = parse_choice<BackendChoice>(name);
    if (!b) fail("--backend {}: unknown backend (expected {})", name, choice_list<BackendChoice>());
    ChoiceSource src;
    src.choice = "--backend " + name;
    src.cpu_hint = "use --backend cpu";
    return select_backend(*b, 0, src);
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

OptimizerSupport optimizer_support(const Backend& backend) {
#if defined(SKEW_HAVE_CUDA)
    if (backend.runs_cuda()) return CUDA_OPTIMIZER_SUPPORT;
#else
    (void)backend;
#endif
    return OptimizerSupport{};
}

std::unique_ptr<OptimizerRunner> make_optimizer_runner(const OptimizerConfig& opt, Backend& backend,
                                                       const Arena& arena) {
    if (!arena.plan) fail("{}: the arena has no memory plan", opt.name);
    require_optimizer_backend(opt, optimizer_support(backend));
    if (!backend.device_memory()) return make_cpu_optimizer_runner(opt);
#if defined(SKEW_HAVE_CUDA)
    if (backend.runs_cuda()) return make_cuda_optimizer_runner(opt, backend, arena);
#endif
    fail("{}: no optimizer step for backend '{}'", opt.name, backend.name());
}

}  // namespace skew
