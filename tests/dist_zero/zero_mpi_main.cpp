// ZeRO-1 over MPI (run as `mpirun -np N test_zero_mpi OUTDIR`, N = 2 or 4; docs/distributed.md):
// every rank computes the one-process step itself (the same gradients on every rank: what the
// data-parallel reduction hands the optimizer), and the ZeRO-1 step over the N ranks must equal it
// bit for bit over 20 steps for every optimizer, without and with expert parallelism 2, with an
// idle expert skipped every third step. Then: resume from the sharded checkpoint of step 10 is
// bit-exact at step 20; a checkpoint of another layout (ZeRO stage, world size) is refused naming
// both; `skew export`'s merge equals the one-process checkpoint's weights. Exit 0 when every check
// passes on every rank, 1 otherwise (rank 0 prints the failures).
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_checkpoint.h"
#include "dist/mpi_communicator.h"
#include "engine/arena.h"
#include "engine/config.h"
#include "engine/error.h"
#include "kernels/backend.h"
#include "kernels/common/bf16.h"
#include "optim/zero_partition.h"
#include "plan/plan.h"
#include "train/zero_step.h"

using namespace skew;
namespace fs = std::filesystem;

namespace {

int g_failures = 0;
int g_rank = 0;

void check(bool ok, const std::string& what) {
    if (ok) return;
    ++g_failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what.c_str());
}

constexpr int64_t STEPS = 20, SAVE_AT = 10;

Config small_config() {
    Config cfg;
    cfg.model.d_model = 32;
    cfg.model.n_heads = 4;
    cfg.model.n_kv_heads = 2;
    cfg.model.d_ff = 64;
    cfg.model.d_expert = 16;
    cfg.model.n_experts = 8;
    cfg.model.vocab_size = 100;
    cfg.model.padded_vocab_size = 128;
    cfg.model.max_seq_len = 16;
    cfg.train.seq_len = 16;
    cfg.train.batch_size = 4;
    cfg.train.microbatch = 1;
    cfg.runtime.backend = BackendChoice::CPU;
    cfg.runtime.workspace_gib = 1.0 / 1024;
    return cfg;
}

float value(uint32_t param, int64_t k, int64_t s) {
    uint64_t h =
        (uint64_t(param) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(k) * 0xBF58476D1CE4E5B9ull) ^ (uint64_t(s) << 40);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return (float(h % 10007) / 10007.0f - 0.5f) * 0.1f;
}

/// Elements [0, n) of a tensor whose element 0 is global element `base`: value(param, base + k, s).
void fill(void* p, DType t, int64_t n, uint32_t param, int64_t base, int64_t s) {
    for (int64_t k = 0; k < n; ++k) {
        const float v = value(param, base + k, s);
        if (t == DType::F32) static_cast<float*>(p)[k] = v;
        else static_cast<bf16*>(p)[k] = f32_to_bf16(v);
    }
}

struct CpuRunner : OptimizerRunner {
    OptimizerConfig opt;
    explicit CpuRunner(OptimizerConfig o) : opt(std::move(o)) {}
    void step(std::span<ParamSlot> params, const OptimStep& st) override { optimizer_step(opt, params, st); }
};

/// One rank's (or the one-process) arena over its held table.
struct Run {
    ParallelLayout layout;
    ParamTable held;
    MemoryPlan plan;
    Arena arena;
    std::unique_ptr<ZeroOptimizer> zero;  // layout.zero()
    std::vector<ParamSlot> slots;         // one process: every parameter with its state
    std::vector<int64_t> base;            // global first element of each held tensor

    Run(const Config& cfg, const ParamTable& global, const OptimizerConfig& opt, const ParallelLayout& l,
        Communicator* world)
        : layout(l), held(held_param_table(global, l)), plan(build_memory_plan(cfg, global, opt, 1, l)),
          arena(allocate_host_arena(plan)) {
        if (l.zero()) zero = make_zero_optimizer(opt, global, held, l, arena, *world);
        else slots = arena_param_slots(opt, held, arena);
        for (const ParamInfo& p : held.params) {
            const int64_t first = held_first_expert(global.params[p.index], p, l);
            base.push_back(first * p.rows() * p.cols());
        }
        for (const ParamInfo& p : held.params) fill(weight(p.index), p.dtype, p.numel(), p.index, base[p.index], 0);
    }
    std::vector<ParamSlot>& whole() { return zero ? zero->slots.whole : slots; }
    void* weight(size_t i) { return whole()[i].weight; }
    void gradients(int64_t s) {
        for (ParamSlot& w : whole())
            fill(const_cast<void*>(w.grad), w.grad_dtype, w.info->numel(), w.info->index, base[w.info->index], s);
    }
};

/// The one-process step with idle experts skipped (as the trainer does).
void reference_step(Run& ref, const OptimizerConfig& opt, Backend& be, const OptimStep& st,
                    const std::vector<IdleExpert>& idle) {
    const IdleExpertSnapshot snap = save_idle_experts(be, opt, ref.slots, idle);
    optimizer_step(opt, ref.slots, st);
    restore_idle_experts(be, snap);
}

std::vector<IdleExpert> idle_at(int64_t s) {
    if (s % 3 != 0) return {};
    return {{1, 3}, {1, 6}};  // block 1 is the MoE block
}

/// Bytes of the held part of a global tensor from the one-process run.
bool held_equal(Run& mine, Run& ref, const ParamInfo& held) {
    const char* r = static_cast<const char*>(ref.weight(held.index)) + mine.base[held.index] * dtype_bytes(held.dtype);
    return std::memcmp(mine.weight(held.index), r, size_t(held.bytes())) == 0;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int result = 0;
    try {
        if (argc != 2) fail("usage: mpirun -np N test_zero_mpi OUTDIR");
        std::unique_ptr<Communicator> world = make_mpi_world_communicator();
        g_rank = world->rank();
        const int64_t N = world->world_size();
        const fs::path out = fs::path(argv[1]);
        if (g_rank == 0) {
            std::error_code ec;
            fs::remove_all(out, ec);
            fs::create_directories(out);
        }
        world->barrier();
        const Config cfg = small_config();
        const ParamTable table = build_param_table(cfg.model);
        std::unique_ptr<Backend> be = make_cpu_backend();
        for (const std::string& name : builtin_optimizer_names()) {
            OptimizerConfig opt = builtin_optimizer(name);
            opt.rank = 4;
            opt.update_proj_gap = 4;
            CpuRunner runner(opt);
            for (int64_t M : {int64_t(1), int64_t(2)}) {
                if (N % M != 0 || N / M < 2) continue;  // ZeRO needs 2 replicas of each expert shard
                const std::string tag = std::string(name) + " M=" + std::to_string(M);
                ParallelLayout l;
                l.world_size = N;
                l.rank = g_rank;
                l.expert_parallel = M;
                l.zero_stage = 1;
                ParallelLayout one;
                Run ref(cfg, table, opt, one, nullptr);
                Run mine(cfg, table, opt, l, world.get());
                const std::string dir = (out / (std::string(name) + "-M" + std::to_string(M))).string();
                const std::string ref_dir = (out / (std::string(name) + "-one")).string();
                std::vector<std::vector<std::byte>> ref_at_save;
                for (int64_t s = 1; s <= STEPS; ++s) {
                    const OptimStep st{s, 1e-2, 42};
                    ref.gradients(s);
                    mine.gradients(s);
                    reference_step(ref, opt, *be, st, idle_at(s));
                    zero_optimizer_step(*mine.zero, runner, st, *be, opt, idle_at(s), *world);
                    if (s == SAVE_AT) {
                        TrainerState ts;
                        ts.step = s;
                        ts.optimizer = opt.name;
                        save_sharded_checkpoint(dir, mine.arena, ts, nullptr, l, mine.zero->partition, table, *world);
                        if (g_rank == 0) save_checkpoint(ref_dir, ref.arena, ts);
                        world->barrier();
                    }
                }
                bool equal = true;
                for (const ParamInfo& p : mine.held.params) equal = equal && held_equal(mine, ref, p);
                check(equal, tag + ": ZeRO-1 weights after 20 steps equal the one-process step's");
                // resume from step 10: bit-exact at step 20 (weights and owned state)
                Run again(cfg, table, opt, l, world.get());
                const TrainerState ts =
                    load_sharded_checkpoint(dir, again.arena, nullptr, l, again.zero->partition, table, *world);
                check(ts.step == SAVE_AT, tag + ": the resumed checkpoint is of step 10");
                for (int64_t s = SAVE_AT + 1; s <= STEPS; ++s) {
                    again.gradients(s);
                    zero_optimizer_step(*again.zero, runner, OptimStep{s, 1e-2, 42}, *be, opt, idle_at(s), *world);
                }
                bool same = true;
                for (const ParamInfo& p : mine.held.params)
                    same = same && std::memcmp(mine.weight(p.index), again.weight(p.index), size_t(p.bytes())) == 0;
                for (size_t i = 0; i < mine.zero->slots.owned.size(); ++i)
                    for (const StateSlotSpec& spec : optimizer_param_state(opt, *mine.zero->slots.owned[i].info))
                        same = same &&
                               std::memcmp(mine.zero->slots.owned[i].st(spec.kind),
                                           again.zero->slots.owned[i].st(spec.kind), size_t(spec.numel()) * 4) == 0;
                check(same, tag + ": resume of the sharded checkpoint of step 10 is bit-exact at step 20");
                // export (the merge) equals the one-process checkpoint's weights
                if (g_rank == 0) {
                    const std::string exported = (out / (std::string(name) + "-export.safetensors")).string();
                    export_checkpoint_weights(dir, table, exported);
                    const std::vector<HostTensor> a = read_checkpoint_weights(ref_dir, table);
                    const SafetensorsHeader h = read_safetensors_header(exported);
                    bool ok = h.tensors.size() == a.size();
                    // load the exported file with the single-process reader into the reference's arena
                    Run fresh(cfg, table, opt, one, nullptr);
                    read_safetensors_into(exported, weight_tensors(fresh.arena));
                    for (const HostTensor& t : a)
                        ok = ok &&
                             std::memcmp(fresh.weight(table.find(t.name)->index), t.data.data(), t.data.size()) == 0;
                    check(ok, tag + ": skew export's merge equals the one-process checkpoint's weights");
                }
                world->barrier();
                // a checkpoint of another layout is refused, naming both
                if (M == 1) {
                    ParallelLayout l0 = l;
                    l0.zero_stage = 0;
                    Run other(cfg, table, opt, l0, world.get());
                    const ZeroPartition p0 = zero_partition(table, opt, l0);
                    const std::string msg =
                        error_of([&] { load_sharded_checkpoint(dir, other.arena, nullptr, l0, p0, table, *world); });
                    check(
                        msg.find("ZeRO stage 1") != std::string::npos && msg.find("ZeRO stage 0") != std::string::npos,
                        tag + ": a ZeRO stage change is refused naming both layouts (got: " + msg + ")");
                }
            }
        }
        // world size 2 -> 4: two ranks save, four try to resume
        if (N == 4) {
            const OptimizerConfig opt = builtin_optimizer("adamw");
            std::unique_ptr<Communicator> half = world->split(g_rank / 2, g_rank % 2);
            ParallelLayout l2;
            l2.world_size = 2;
            l2.rank = half->rank();
            Run two(cfg, table, opt, l2, half.get());
            const std::string dir = (out / "world2").string();
            if (g_rank < 2) {
                TrainerState ts;
                ts.step = 1;
                ts.optimizer = opt.name;
                save_sharded_checkpoint(dir, two.arena, ts, nullptr, l2, two.zero->partition, table, *half);
            }
            world->barrier();
            ParallelLayout l4;
            l4.world_size = 4;
            l4.rank = g_rank;
            Run four(cfg, table, opt, l4, world.get());
            const std::string msg = error_of(
                [&] { load_sharded_checkpoint(dir, four.arena, nullptr, l4, four.zero->partition, table, *world); });
            check(msg.find("world size 2") != std::string::npos && msg.find("world size 4") != std::string::npos,
                  "a world size change 2 -> 4 is refused naming both layouts (got: " + msg + ")");
        }
        int failures = g_failures;
        MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (g_rank == 0) std::printf("test_zero_mpi: %d ranks, %d failed checks\n", int(N), failures);
        result = failures == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: error: %s\n", g_rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return result;
}
