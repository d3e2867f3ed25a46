// Data-parallel collectives of a training step (train/data_parallel.h, docs/distributed.md).
#include "train/data_parallel.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/config_hint.h"
#include "engine/error.h"

namespace skew {

std::string world_size_choices(int64_t n, int64_t near, size_t most) {
    std::vector<int64_t> d;
    for (int64_t k = 1; k <= n; ++k)
        if (n % k == 0) d.push_back(k);
    std::stable_sort(d.begin(), d.end(),
                     [&](int64_t a, int64_t b) { return std::llabs(a - near) < std::llabs(b - near); });
    if (d.size() > most) d.resize(most);
    std::sort(d.begin(), d.end());
    std::string out;
    for (size_t i = 0; i < d.size(); ++i)
        out += (i == 0 ? "" : i + 1 == d.size() ? " or " : ", ") + std::to_string(d[i]);
    return out;
}

DataParallel dp_make(Communicator& comm, const Config& cfg, int64_t microbatch, const std::string& resume_run) {
    const TrainConfig& tc = cfg.train;
    DataParallel dp;
    dp.comm = &comm;
    dp.rank = comm.rank();
    dp.world_size = comm.world_size();
    const int64_t per_step = int64_t(dp.world_size) * microbatch;
    if (microbatch < 1 || tc.batch_size % per_step != 0) {
        // What would work: other world sizes (a command-line change, so also under --resume),
        // a smaller microbatch or another batch size (config changes)
        std::vector<std::string> ways;
        if (microbatch >= 1 && tc.batch_size % microbatch == 0)
            ways.push_back(fmt::format("run on {} ranks with mpirun -np",
                                       world_size_choices(tc.batch_size / microbatch, dp.world_size)));
        if (tc.batch_size % dp.world_size == 0) {
            int64_t m = std::min<int64_t>(std::max<int64_t>(1, microbatch), tc.batch_size / dp.world_size);
            while ((tc.batch_size / dp.world_size) % m != 0) --m;
            ways.push_back(config_change_hint(cfg, "train.microbatch", std::to_string(m), resume_run));
        }
        if (microbatch >= 1)
            ways.push_back(config_change_hint(cfg, "train.batch_size",
                                              std::to_string((tc.batch_size / per_step + 1) * per_step), resume_run));
        std::erase(ways, std::string());
        fail(
            "train.batch_size {} is not a multiple of the world size {} x train.microbatch {} = {}: every rank runs "
            "the same number of whole microbatches of each global batch{}",
            tc.batch_size, dp.world_size, microbatch, per_step,
            ways.empty() ? "" : fmt::format(" ({})", fmt::join(ways, ", or ")));
    }
    dp.accum_steps = tc.batch_size / per_step;
    return dp;
}

namespace {

Communicator& bucket_comm(const DataParallel& dp, const GradBucket& b) {
    return b.experts ? *dp.expert_comm : dp.device_comm ? *dp.device_comm : *dp.comm;
}

// Whether bucket `b` is summed as a packed host copy: several tensors on host memory, or a device
// arena under a host communicator. Otherwise each tensor is summed in place (the communicator reads
// the backend's memory: NCCL on the device, MPI on the CPU backend's host arena).
bool packs(const DataParallel& dp, const Backend& backend, const GradBucket& b) {
    const Communicator& c = bucket_comm(dp, b);
    const bool direct = c.device_memory() == backend.device_memory();
    return !(direct && (b.params.size() == 1 || c.device_memory()));
}

}  // namespace

void dp_plan_buckets(DataParallel& dp, const Model& m, double bucket_mib) {
    dp.buckets.clear();
    dp.bucket_mib = bucket_mib;
    dp.bucket_of.assign(m.params.size(), -1);
    const int64_t limit = std::max<int64_t>(1, int64_t(bucket_mib * 1024.0 * 1024.0));
    int64_t largest = 0;
    int packed = 0;
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
        dp.bucket_of[k] = int64_t(dp.buckets.size()) - 1;
    }
    for (const GradBucket& b : dp.buckets)
        if (m.backend && packs(dp, *m.backend, b)) largest = std::max(largest, b.bytes), ++packed;
    dp.slot_bytes = largest;
    dp.staging_slots = std::min(packed, DP_MAX_STAGING_SLOTS);
    // allocated on first use (a run with a device communicator never packs)
    dp.staging.clear();
    dp.slot_user.assign(size_t(dp.staging_slots), -1);
    dp.in_flight.clear();
    dp.waiting.assign(dp.buckets.size(), 0);
    dp.next_bucket = 0;
}

int64_t dp_global_microbatch(const DataParallel& dp, int64_t m) { return int64_t(dp.rank) * dp.accum_steps + m; }

namespace {

// Whether any sum runs at all: world size 1 under mpirun on CUDA still runs NCCL's all-reduce (the
// path the GPU test checks).
bool dp_reduces(const DataParallel& dp) { return dp.world_size > 1 || dp.device_comm; }

// Wait for in-flight entry `i`, unpack a packed bucket into the gradients, free its slot.
void finish_bucket(DataParallel& dp, Model& m, Backend& backend, size_t i) {
    DataParallel::InFlight& f = dp.in_flight[i];
    if (f.done) return;
    f.comm->wait(f.ticket);
    f.done = true;
    if (f.slot < 0) return;
    const GradBucket& b = dp.buckets[f.bucket];
    const bool direct = f.comm->device_memory() == backend.device_memory();
    const int64_t es = comm_dtype_bytes(b.dtype);
    std::byte* base = dp.staging.data() + f.slot * dp.slot_bytes;
    int64_t off = 0;
    for (size_t k : b.params) {
        const int64_t n = m.params[k].numel() * es;
        if (direct) std::memcpy(m.params[k].grad.data, base + off, size_t(n));
        else backend.copy_to_device(m.params[k].grad.data, base + off, n);
        off += n;
    }
    dp.slot_user[size_t(f.slot)] = -1;
}

// Start the sum of bucket `bi` (its gradients complete): one non-blocking sum per tensor in place
// when the communicator reads the backend's memory (NCCL on the device, MPI on the CPU backend's
// host arena) and the bucket is one tensor or on the device; else one sum of a packed host copy in
// a staging slot (when every slot is taken, the oldest packed bucket is finished first).
void start_bucket(DataParallel& dp, Model& m, Backend& backend, size_t bi) {
    const GradBucket& b = dp.buckets[bi];
    Communicator& c = bucket_comm(dp, b);
    if (b.experts && c.world_size() == 1) return;  // expert parallel over every rank: no other holder
    const int64_t es = comm_dtype_bytes(b.dtype);
    const bool direct = c.device_memory() == backend.device_memory();
    if (!packs(dp, backend, b)) {
        for (size_t k : b.params)
            dp.in_flight.push_back(DataParallel::InFlight{
                bi, &c, c.start_allreduce_sum(m.params[k].grad.data, m.params[k].numel(), b.dtype)});
        return;
    }
    if (b.bytes > dp.slot_bytes || dp.staging_slots < 1)
        fail("dp_reduce_gradients: bucket of {} bytes exceeds the staging slots of {} bytes", b.bytes, dp.slot_bytes);
    if (dp.staging.empty()) dp.staging.assign(size_t(dp.slot_bytes * dp.staging_slots), std::byte{0});
    int slot = -1;
    for (int s = 0; s < dp.staging_slots && slot < 0; ++s)
        if (dp.slot_user[size_t(s)] < 0) slot = s;
    if (slot < 0) {  // every slot in flight: finish the oldest packed bucket
        size_t oldest = dp.in_flight.size();
        for (size_t i = 0; i < dp.in_flight.size() && oldest == dp.in_flight.size(); ++i)
            if (!dp.in_flight[i].done && dp.in_flight[i].slot >= 0) oldest = i;
        slot = dp.in_flight[oldest].slot;
        finish_bucket(dp, m, backend, oldest);
    }
    std::byte* base = dp.staging.data() + slot * dp.slot_bytes;
    int64_t off = 0;
    for (size_t k : b.params) {
        const int64_t n = m.params[k].numel() * es;
        if (direct) std::memcpy(base + off, m.params[k].grad.data, size_t(n));
        else backend.copy_to_host(base + off, m.params[k].grad.data, n);
        off += n;
    }
    dp.slot_user[size_t(slot)] = int(dp.in_flight.size());
    dp.in_flight.push_back(DataParallel::InFlight{bi, &c, c.start_allreduce_sum(base, off / es, b.dtype), slot});
}

// Start every bucket from next_bucket on whose gradients are all complete (waiting 0), in order.
void start_ready_buckets(DataParallel& dp, Model& m, Backend& backend) {
    while (dp.next_bucket < dp.buckets.size() && dp.waiting[dp.next_bucket] == 0)
        start_bucket(dp, m, backend, dp.next_bucket++);
}

}  // namespace

bool dp_overlap_applies(const DataParallel& dp, const Model& m) {
    if (!dp.overlap || !dp_reduces(dp) || dp.buckets.empty()) return false;
    return !(m.ep.on() && m.ep.comm && m.ep.comm->device_memory());
}

void dp_arm_overlap(DataParallel& dp, Model& m, Backend& backend) {
    if (!dp_overlap_applies(dp, m)) return;
    if (dp.bucket_of.size() != m.params.size()) fail("dp_arm_overlap: the buckets were planned for another model");
    if (!dp.in_flight.empty() || dp.next_bucket != 0)
        fail("dp_arm_overlap: the previous step's sums are still in flight");
    for (size_t b = 0; b < dp.buckets.size(); ++b) dp.waiting[b] = int64_t(dp.buckets[b].params.size());
    m.grads_done = [&dp, &m, &backend](std::span<const size_t> params) {
        for (size_t k : params) {
            const int64_t b = k < dp.bucket_of.size() ? dp.bucket_of[k] : -1;
            if (b < 0) continue;  // no gradient buffer (deferred expert banks)
            if (dp.waiting[size_t(b)] <= 0)
                fail("data parallel: the backward reported parameter {} complete twice", m.params[k].info->name);
            --dp.waiting[size_t(b)];
        }
        start_ready_buckets(dp, m, backend);
    };
}

void dp_reduce_gradients(DataParallel& dp, Model& m, Backend& backend) {
    m.grads_done = nullptr;
    if (!dp_reduces(dp)) return;
    dp.started_in_backward = dp.next_bucket;
    if (!dp.reported) {
        dp.reported = true;
        int64_t bytes = 0;
        for (const GradBucket& b : dp.buckets) bytes += b.bytes;
        spdlog::info(
            "data parallel: gradients summed in {} buckets ({:.1f} MiB, parallel.bucket_mib {}); {} of them "
            "started during the backward{}",
            dp.buckets.size(), double(bytes) / 1048576.0, dp.bucket_mib, dp.started_in_backward,
            dp.overlap && !dp_overlap_applies(dp, m) ? " (not overlapped: expert parallel on a device communicator)"
            : !dp.overlap                            ? " (parallel.overlap_grad_reduce: false)"
                                                     : "");
    }
    // whatever the backward did not start (every bucket when the overlap is off), in bucket order
    std::fill(dp.waiting.begin(), dp.waiting.end(), 0);
    start_ready_buckets(dp, m, backend);
    for (size_t i = 0; i < dp.in_flight.size(); ++i) finish_bucket(dp, m, backend, i);
    // every communicator used: the device path's backend stream waits on its communication stream
    std::vector<Communicator*> used;
    for (const DataParallel::InFlight& f : dp.in_flight)
        if (std::find(used.begin(), used.end(), f.comm) == used.end()) used.push_back(f.comm);
    for (Communicator* c : used) c->wait_all();
    dp.in_flight.clear();
    dp.next_bucket = 0;
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
        fail(
            "data parallel: {}: the {} of rank(s) {} of {} differ from its rank 0's (checksums {:016x} vs {:016x}); "
            "the ranks no longer train one model",
            when, experts ? "expert weights" : "weights", fmt::join(differ, ", "), group,
            uint64_t(all[size_t(differ[0])]), uint64_t(all[0]));
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
