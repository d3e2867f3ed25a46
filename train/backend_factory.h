// The backend of a run, chosen from runtime.backend: the one place above kernels/ that names the
// backends (the trainer itself works through the Backend interface only).
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "engine/config.h"
#include "kernels/backend.h"

namespace skew {

/// The backend of runtime.backend: `cpu`; `cuda` (CUDA device `device`, the rank's local rank in a
/// multi-rank run, docs/distributed.md; a clear error when this build has no
/// CUDA backend or no GPU is visible); `auto`, the CUDA backend when built with CUDA and a GPU is
/// visible, else the CPU. Throws skew::Error naming the config file and the key; its hint proposes
/// runtime.backend: cpu as a new run when resume_run is not empty (`skew train --resume RUN` keeps
/// the run's config: config_change_hint).
std::unique_ptr<Backend> make_backend(const Config& cfg, int device = 0, const std::string& resume_run = "");

/// The communicator that sums gradients where `backend` keeps them: for the CUDA backend, NCCL on
/// CUDA device `device` and the backend's stream, bootstrapped over `host` (docs/distributed.md);
/// null for a host backend (`host` itself serves). Throws skew::Error when NCCL fails to start.
std::unique_ptr<Communicator> make_device_communicator(Backend& backend, Communicator& host, int device);

}  // namespace skew
