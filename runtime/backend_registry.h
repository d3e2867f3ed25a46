// The backends, their device communicators and their optimizer steps: the one place above kernels/
// that names a backend and knows which are built (docs/architecture.md, "The session"). Everything
// else works through the Backend interface and its capability queries (kernels/backend.h) and
// through the OptimizerRunner and OptimizerSupport made here (optim/optimizer_runner.h).
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "kernels/backend.h"
#include "optim/optimizer_runner.h"

namespace skew {

/// The backend of runtime.backend: `cpu`; `cuda` (CUDA device `device`, the rank's local rank in a
/// multi-rank run, docs/distributed.md; a clear error when this build has no
/// CUDA backend or no GPU is visible); `auto`, the CUDA backend when built with CUDA and a GPU is
/// visible, else the CPU. Throws skew::Error naming the config file and the key; its hint proposes
/// runtime.backend: cpu as a new run when resume_run is not empty (`skew train --resume RUN` keeps
/// the run's config: config_change_hint).
std::unique_ptr<Backend> make_backend(const Config& cfg, int device = 0, const std::string& resume_run = "");

/// The backend of a command-line name (`skew eval/sample --backend`, the benches): cpu, cuda
/// (device 0) or auto. Throws skew::Error naming `--backend` when cuda is asked for without a CUDA
/// build or a visible GPU, or the name is none of these.
std::unique_ptr<Backend> make_named_backend(const std::string& name);

/// The runtime.backend value that names `backend` (what a run records after `auto` chose).
BackendChoice backend_choice_of(const Backend& backend);

/// The communicator that sums gradients where `backend` keeps them: for a backend that runs CUDA,
/// NCCL on CUDA device `device` and the backend's stream, bootstrapped over `host`
/// (docs/distributed.md); null for a host backend (`host` itself serves). Throws skew::Error when
/// NCCL fails to start, or for a device backend this build has no communicator for.
std::unique_ptr<Communicator> make_device_communicator(Backend& backend, Communicator& host, int device);

/// What the optimizer step of `backend` does differently from the CPU's, per feature: the CPU's
/// for a host backend, CUDA_OPTIMIZER_SUPPORT (optim/optimizer_runner_cuda.h) for one that
/// runs CUDA.
OptimizerSupport optimizer_support(const Backend& backend);

/// The step of `opt` for `backend` over `arena` (allocated from a plan for `opt`): the CPU loops for
/// a host backend (make_cpu_optimizer_runner), the CUDA kernels for one that runs CUDA
/// (make_cuda_optimizer_runner). Checks the optimizer against the backend first
/// (require_optimizer_backend). Throws skew::Error naming the optimizer when the arena has no
/// plan, the backend has no optimizer step or a CUDA handle fails; a tensor needing more scratch
/// than the arena's ws.optimizer is refused by its step, named.
std::unique_ptr<OptimizerRunner> make_optimizer_runner(const OptimizerConfig& opt, Backend& backend,
                                                       const Arena& arena);

}  // namespace skew
