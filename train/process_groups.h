// The run's communicators as one value (docs/distributed.md): the world of ranks, and with
// expert parallelism (parallel.expert M > 1) the group of M ranks that exchange a MoE block's
// rows and the ranks holding the same expert shard; over host memory first, then, for a CUDA run
// under a launcher, the device's (NCCL), which every group is split from again.
#pragma once
#include <cstdint>
#include <memory>

#include "dist/communicator.h"
#include "engine/config.h"
#include "kernels/backend.h"

namespace skew {

/// The groups of one rank (owned, except the world).
struct ProcessGroups {
    Communicator* world = nullptr;                 // every rank (host memory)
    std::unique_ptr<Communicator> self;            // the one-process world when no launcher gave one
    std::unique_ptr<Communicator> device;          // NCCL over the same ranks (CUDA runs under a launcher), or null
    std::unique_ptr<Communicator> expert_group;    // world ranks [g M, (g + 1) M) of this rank's group g
    std::unique_ptr<Communicator> expert_holders;  // the ranks with this rank's experts (rank % M equal)
};

/// The host groups of `world` (null: this one process) for cfg.parallel.expert. Throws
/// skew::Error when the world size is not a multiple of parallel.expert. Collective.
ProcessGroups make_process_groups(Communicator* world, const Config& cfg);

/// The device communicator of `backend` on CUDA device `device` (make_device_communicator), the
/// expert groups split from it again. Collective; throws skew::Error when NCCL fails to start.
void process_groups_to_device(ProcessGroups& g, const Config& cfg, Backend& backend, int device);

}  // namespace skew
