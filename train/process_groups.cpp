// The run's communicators (train/process_groups.h).
#include "train/process_groups.h"

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "runtime/backend_registry.h"

namespace skew {
namespace {

// expert parallel: rank r holds experts [(r % M) E/M, (r % M + 1) E/M) of every bank; its group
// is the M consecutive ranks r - r % M ..., the holders of the same experts every M-th rank
void split_expert_groups(ProcessGroups& g, Communicator& over, int64_t M) {
    if (M <= 1) return;
    const int rank = g.world->rank();
    g.expert_group = over.split(int(rank / M), rank);
    g.expert_holders = over.split(int(rank % M), rank);
}

}  // namespace

ProcessGroups make_process_groups(Communicator* world, const Config& cfg) {
    ProcessGroups g;
    if (!world) {
        g.self = make_self_communicator();
        world = g.self.get();
    }
    g.world = world;
    const int64_t M = cfg.parallel.expert;
    if (world->world_size() % M != 0)
        fail("parallel.expert {} needs a multiple of {} ranks (mpirun -np); this run has {}", M, M,
             world->world_size());
    split_expert_groups(g, *world, M);
    return g;
}

void process_groups_to_device(ProcessGroups& g, const Config& cfg, Backend& backend, int device) {
    g.device = make_device_communicator(backend, *g.world, device);
    spdlog::info("data parallel: {} ranks, gradients summed over NCCL ({})", g.world->world_size(),
                 g.device->describe());
    split_expert_groups(g, *g.device, cfg.parallel.expert);  // the expert exchange moves device memory too
}

}  // namespace skew
