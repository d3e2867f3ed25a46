// The ZeRO-1 optimizer step (train/zero_step.h): owned ranges stepped, weights all-gathered.
#include "train/zero_step.h"

#include "engine/error.h"

namespace skew {
namespace {

CommDType weight_comm_dtype(DType t) {
    switch (t) {
        case DType::BF16: return CommDType::BF16;
        case DType::F32: return CommDType::F32;
        case DType::I32: return CommDType::I32;
        case DType::U16: return CommDType::BF16;  // 2-byte words, copied
    }
    return CommDType::BYTE;
}

}  // namespace

std::unique_ptr<ZeroOptimizer> make_zero_optimizer(const OptimizerConfig& opt, const ParamTable& global,
                                                   const ParamTable& held, const ParallelLayout& layout,
                                                   const Arena& arena, Communicator& world,
                                                   Communicator* expert_holders) {
    if (world.world_size() != layout.world_size || world.rank() != layout.rank)
        fail("ZeRO-1: the communicator is {} but the layout is rank {} of {}", world.describe(), layout.rank,
             layout.world_size);
    auto z = std::make_unique<ZeroOptimizer>();
    z->layout = layout;
    z->partition = zero_partition(global, opt, layout);
    z->owned_table = owned_param_table(global, z->partition, layout.rank);
    z->slots = zero_arena_slots(opt, held, z->owned_table, layout, global, z->partition, arena);
    if (layout.expert_parallel > 1 && expert_holders) {
        if (expert_holders->world_size() != layout.expert_replicas() ||
            expert_holders->rank() != layout.expert_replica())
            fail("ZeRO-1: the expert holders' communicator is {}, the layout wants replica {} of {}",
                 expert_holders->describe(), layout.expert_replica(), layout.expert_replicas());
        z->expert_holders = expert_holders;
    } else if (layout.expert_parallel > 1) {
        z->expert_group = world.split(int(layout.expert_rank()), int(layout.expert_replica()));
    }
    return z;
}

void zero_optimizer_step(ZeroOptimizer& z, OptimizerRunner& runner, const OptimStep& step, Backend& backend,
                         const OptimizerConfig& opt, const std::vector<IdleExpert>& idle, Communicator& world) {
    // idle experts: snapshot the owned slices (expert indices relative to each owned range)
    IdleExpertSnapshot snap;
    if (!idle.empty()) {
        const auto& ranges = z.partition.owned[size_t(z.layout.rank)];
        for (size_t i = 0; i < z.slots.owned.size(); ++i) {
            const ParamSlot& s = z.slots.owned[i];
            if (!is_expert_bank(*s.info)) continue;
            std::vector<IdleExpert> local;
            for (const IdleExpert& ie : idle)
                if (ie.block == s.info->block && ie.expert >= ranges[i].matrix_begin &&
                    ie.expert < ranges[i].matrix_end)
                    local.push_back({ie.block, ie.expert - ranges[i].matrix_begin});
            if (local.empty()) continue;
            IdleExpertSnapshot part = save_idle_experts(backend, opt, std::span<const ParamSlot>(&s, 1), local);
            for (auto& piece : part.pieces) snap.pieces.push_back(std::move(piece));
        }
    }
    runner.step(z.slots.owned, step);
    restore_idle_experts(backend, snap);
    zero_allgather_weights(z, world, backend);
}

void zero_allgather_weights(ZeroOptimizer& z, Communicator& world, Backend& backend) {
    const bool stage = backend.device_memory() && !world.device_memory();  // device weights, host collectives
    std::vector<std::byte> host;
    const ZeroPartition& part = z.partition;
    const int64_t N = part.world_size, M = part.expert_parallel;
    // owners of each parameter: (rank, range) in rank order
    std::vector<std::vector<std::pair<int64_t, const OwnedRange*>>> owners(z.slots.whole.size());
    for (int64_t r = 0; r < N; ++r)
        for (const OwnedRange& o : part.owned[size_t(r)]) {
            if (o.param >= owners.size()) fail("ZeRO-1: owned parameter {} is outside the table", o.param);
            owners[o.param].push_back({r, &o});
        }
    for (size_t i = 0; i < z.slots.whole.size(); ++i) {
        const ParamSlot& w = z.slots.whole[i];
        const ParamInfo& p = *w.info;
        const CommDType ct = weight_comm_dtype(p.dtype);
        void* buf = w.weight;
        if (stage) {
            host.resize(size_t(p.bytes()));
            backend.copy_to_host(host.data(), w.weight, p.bytes());
            buf = host.data();
        }
        if (!is_expert_bank(p)) {
            if (owners[i].size() != 1)
                fail("ZeRO-1: '{}' has {} owners; a whole tensor has one", p.name, owners[i].size());
            world.broadcast(buf, p.numel(), ct, int(owners[i][0].first));
            if (stage) backend.copy_to_device(w.weight, host.data(), p.bytes());
            continue;
        }
        // a bank: the ranks holding this rank's expert shard gather their ranges of it
        Communicator& group = M > 1 ? *z.bank_group() : world;
        if (group.device_memory() != world.device_memory())
            fail("ZeRO-1: '{}': the expert holders' communicator ({}) and the world's ({}) are not in the same memory",
                 p.name, group.describe(), world.describe());
        const int64_t G = group.world_size();
        const int64_t per = p.rows() * p.cols();
        const int64_t first_held = z.layout.expert_rank() * p.n_matrices();  // p is the held bank
        std::vector<int64_t> counts(size_t(G), 0), displs(size_t(G), 0);
        for (const auto& [r, o] : owners[i]) {
            if (r % M != z.layout.expert_rank()) continue;  // another expert shard
            const int64_t g = M > 1 ? r / M : r;            // position in `group` (split keyed by replica)
            counts[size_t(g)] = (o->matrix_end - o->matrix_begin) * per;
            displs[size_t(g)] = (o->matrix_begin - (M > 1 ? first_held : 0)) * per;
        }
        const int64_t me = group.rank();
        const char* send = static_cast<const char*>(buf) + displs[size_t(me)] * dtype_bytes(p.dtype);
        group.allgatherv(send, buf, counts, displs, ct);
        if (stage) backend.copy_to_device(w.weight, host.data(), p.bytes());
    }
}

void allreduce_expert_tokens(ExpertTokenCounts& counts, Communicator& world) {
    if (world.world_size() == 1) return;
    if (world.device_memory())
        fail("expert token counts: {} reduces device memory; pass the run's host communicator", world.describe());
    for (auto& c : counts.counts)
        if (!c.empty()) world.allreduce_sum(c.data(), int64_t(c.size()), CommDType::I64);
}

}  // namespace skew
