// Data-parallel collectives of a training step (train/data_parallel.h, docs/distributed.md).
#include "train/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/error.h"

namespace skew {

DataParallel dp_make(Communicator& comm, const TrainConfig& tc, int64_t microbatch) {
    DataParallel dp;
    dp.comm = &comm;
    dp.rank = comm.rank();
    dp.world_size = comm.world_size();
    const int64_t per_step = int64_t(dp.world_size) * microbatch;
    if (microbatch < 1 || tc.batch_size % per_step != 0)
        fail("train.batch_size {} is not a multiple of the world size {} x train.microbatch {} = {}: every rank runs "
             "the same number of whole microbatches of each global batch (choose train.batch_size a multiple of {}, or "
             "a train.microbatch that divides train.batch_size / {})",
             tc.batch_size, dp.world_size, microbatch, per_step, per_step, dp.world_size);
    dp.accum_steps = tc.batch_size / per_step;
    return dp;
}

void dp_plan_buckets(DataParallel& dp, const Model& m, double bucket_mib) {
    dp.buckets.clear();
    const int64_t limit = std::max<int64_t>(1, int64_t(bucket_mib * 1024.0 * 1024.0));
    int64_t largest = 0;
    for (size_t k = m.params.size(); k-- > 0;) {
        const ParamRef& p = m.params[k];
        if (!p.grad) continue;  // deferred expert banks have no gradient buffer
        const CommDType t = p.grad.type == ScalarType::BF16 ? CommDType::BF16 : CommDType::F32;
        const int64_t bytes = p.numel() * comm_dtype_bytes(t);
        const bool experts = dp.expert_comm && p.info->tier == Tier::EXPERTS;
        if (dp.buckets.empty() || dp.buckets.back().dtype != t || dp.buckets.back().experts != experts ||
            dp.buckets.back().bytes + bytes > limit)
            dp.buckets.push_back(GradBucket{{}, t, 0, experts});
        dp.buckets.back().params.push_back(k);
        dp.buckets.back().bytes += bytes;
    }
    for (const GradBucket& b : dp.buckets)
        if (b.params.size() > 1) largest = std::max(largest, b.bytes);
    dp.staging.assign(size_t(largest), std::byte{0});
}

int64_t dp_global_microbatch(const DataParallel& dp, int64_t m) { return int64_t(dp.rank) * dp.accum_steps + m; }

void dp_reduce_gradients(DataParallel& dp, Model& m, Backend& backend) {
    // world size 1 under mpirun on CUDA still runs NCCL's all-reduce (the path the GPU test checks)
    if (dp.world_size == 1 && !dp.device_comm) return;
    Communicator& world = dp.device_comm ? *dp.device_comm : *dp.comm;
    for (const GradBucket& b : dp.buckets) {
        Communicator& c = b.experts ? *dp.expert_comm : world;
        if (b.experts && c.world_size() == 1) continue;  // expert parallel over every rank: no other holder
        const int64_t es = comm_dtype_bytes(b.dtype);
        // In place when the communicator reads the backend's memory (NCCL on the device, MPI on
        // the CPU backend's host arena) and the bucket is one tensor.
        const bool direct = c.device_memory() == backend.device_memory();
        if (direct && (b.params.size() == 1 || c.device_memory())) {
            for (size_t k : b.params) c.allreduce_sum(m.params[k].grad.data, m.params[k].numel(), b.dtype);
            continue;
        }
        // Several small tensors (or a device arena under a host communicator): one collective on
        // a packed host copy.
        int64_t off = 0;
        for (size_t k : b.params) {
            const int64_t n = m.params[k].numel() * es;
            if (direct) std::memcpy(dp.staging.data() + off, m.params[k].grad.data, size_t(n));
            else backend.copy_to_host(dp.staging.data() + off, m.params[k].grad.data, n);
            off += n;
        }
        if (int64_t(dp.staging.size()) < off) fail("dp_reduce_gradients: bucket of {} bytes exceeds staging", off);
        c.allreduce_sum(dp.staging.data(), off / es, b.dtype);
        off = 0;
        for (size_t k : b.params) {
            const int64_t n = m.params[k].numel() * es;
            if (direct) std::memcpy(m.params[k].grad.data, dp.staging.data() + off, size_t(n));
            else backend.copy_to_device(m.params[k].grad.data, dp.staging.data() + off, n);
            off += n;
        }
    }
}

void dp_after_optimizer_step(DataParallel& dp, Model&, Backend&) {
    if (dp.world_size == 1) return;
    // parallel.zero_stage 0: the weights agree already (same update of the same summed gradients).
}

void dp_sum(DataParallel& dp, double* values, int64_t n) {
    if (dp.world_size > 1) dp.comm->allreduce_sum(values, n, CommDType::F64);
}

void dp_sum_expert_tokens(DataParallel& dp, ExpertTokenCounts& c) {
    if (dp.world_size == 1) return;
    std::vector<int64_t> flat;
    for (const auto& block : c.counts) flat.insert(flat.end(), block.begin(), block.end());
    if (flat.empty()) return;
    dp.comm->allreduce_sum(flat.data(), int64_t(flat.size()), CommDType::I64);
    size_t at = 0;
    for (auto& block : c.counts)
        for (int64_t& v : block) v = flat[at++];
}

bool dp_any(DataParallel& dp, bool flag) {
    if (dp.world_size == 1) return flag;
    int32_t v = flag ? 1 : 0;
    dp.comm->allreduce_sum(&v, 1, CommDType::I32);
    return v > 0;
}

namespace {

// FNV-1a over the weights of `m` that are (experts) or are not (!experts) expert banks, compared
// over `c`: throws naming the ranks of `c` whose checksum differs from its rank 0's.
void check_agree(Communicator& c, Model& m, Backend& backend, bool experts, const char* group, const char* when) {
    uint64_t h = 1469598103934665603ull;
    std::vector<unsigned char> host;
    for (const ParamRef& p : m.params) {
        if ((p.info->tier == Tier::EXPERTS) != experts) continue;
        const int64_t bytes = p.numel() * (p.info->dtype == DType::BF16 ? 2 : 4);
        host.resize(size_t(bytes));
        backend.copy_to_host(host.data(), p.weight, bytes);
        for (unsigned char b : host) h = (h ^ b) * 1099511628211ull;
    }
    std::vector<int64_t> all(size_t(c.world_size()));
    const int64_t mine = int64_t(h);
    c.allgather(&mine, all.data(), 1, CommDType::I64);
    std::vector<int> differ;
    for (int r = 1; r < c.world_size(); ++r)
        if (all[size_t(r)] != all[0]) differ.push_back(r);
    if (!differ.empty())
        fail("data parallel: {}: the {} of rank(s) {} of {} differ from its rank 0's (checksums {:016x} vs {:016x}); "
             "the ranks no longer train one model", when, experts ? "expert weights" : "weights", fmt::join(differ, ", "),
             group, uint64_t(all[size_t(differ[0])]), uint64_t(all[0]));
}

}  // namespace

void dp_check_weights_agree(DataParallel& dp, Model& m, Backend& backend, const char* when) {
    if (dp.world_size == 1 || backend.device_memory()) return;
    if (!dp.expert_comm) {
        check_agree(*dp.comm, m, backend, false, "the run", when);
        check_agree(*dp.comm, m, backend, true, "the run", when);
        return;
    }
    // expert parallel: every rank holds the same non-expert weights; the expert banks agree
    // between the ranks that hold the same experts
    check_agree(*dp.comm, m, backend, false, "the run", when);
    if (dp.expert_comm->world_size() > 1)
        check_agree(*dp.expert_comm, m, backend, true, "the ranks holding the same experts", when);
}

}  // namespace skew
