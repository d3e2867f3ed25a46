// ZeRO-1 in one process (optim/zero_partition.h, train/zero_step.h, docs/distributed.md): the
// partition covers every tensor and expert once and is balanced by state bytes; each rank's plan
// holds exactly the state of its owned ranges (a hand sum); and stepping the N partitions one
// after another, then copying each owner's ranges to every rank (what the all-gather does), gives
// weights and state bit-identical to the one-process step over several steps, for every optimizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/parallel_layout.h"
#include "kernels/common/bf16.h"
#include "optim/zero_partition.h"
#include "plan/plan.h"

using namespace skew;

namespace {

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

ParallelLayout layout_of(int64_t n, int64_t rank, int64_t m = 1) {
    ParallelLayout l;
    l.world_size = n;
    l.rank = rank;
    l.expert_parallel = m;
    l.zero_stage = 1;
    return l;
}

// Deterministic values in [-0.05, 0.05): weights (step 0) and the gradient of step s.
float value(uint32_t param, int64_t k, int64_t s) {
    uint64_t h =
        (uint64_t(param) * 0x9E3779B97F4A7C15ull) ^ (uint64_t(k) * 0xBF58476D1CE4E5B9ull) ^ (uint64_t(s) << 40);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return (float(h % 10007) / 10007.0f - 0.5f) * 0.1f;
}

void fill(void* p, DType t, int64_t n, uint32_t param, int64_t s) {
    for (int64_t k = 0; k < n; ++k) {
        const float v = value(param, k, s);
        if (t == DType::F32) static_cast<float*>(p)[k] = v;
        else static_cast<bf16*>(p)[k] = f32_to_bf16(v);
    }
}

/// One rank's arena and slots (or the one-process run's, with rank 0 of 1).
struct Rank {
    MemoryPlan plan;
    Arena arena;
    ZeroPartition part;
    ParamTable owned;
    ZeroSlots slots;
    Rank(const Config& cfg, const ParamTable& table, const OptimizerConfig& opt, const ParallelLayout& l)
        : plan(build_memory_plan(cfg, table, opt, 1, l)), arena(allocate_host_arena(plan)) {
        part = zero_partition(table, opt, l);
        owned = owned_param_table(table, part, l.rank);
        slots = zero_arena_slots(opt, table, owned, l, table, part, arena);
        for (const ParamSlot& s : slots.whole) fill(s.weight, s.info->dtype, s.info->numel(), s.info->index, 0);
    }
    void gradients(int64_t step) {
        for (const ParamSlot& s : slots.whole)
            fill(const_cast<void*>(s.grad), s.grad_dtype, s.info->numel(), s.info->index, step);
    }
};

int64_t per_matrix(const ParamInfo& p) { return is_expert_bank(p) ? p.rows() * p.cols() : p.numel(); }

}  // namespace

TEST_CASE(
    "ZeRO partition: every tensor and expert is owned exactly once, in consecutive ranks, balanced by state bytes") {
    const Config cfg = small_config();
    const ParamTable table = build_param_table(cfg.model);
    for (const char* name : {"skewadam", "adamw", "muon", "galore"}) {
        const OptimizerConfig opt = builtin_optimizer(name);
        for (int64_t n : {1, 2, 3, 4, 8}) {
            INFO(name << " world size " << n);
            const ZeroPartition part = zero_partition(table, opt, layout_of(n, 0));
            REQUIRE(part.owned.size() == size_t(n));
            // coverage: each unit (tensor or expert) once; a tensor's owners are consecutive ranks
            std::vector<std::vector<int>> seen(table.params.size());
            std::vector<int64_t> last_rank(table.params.size(), -1);
            int64_t total = 0, max_dense = 0, max_expert = 0;
            for (int64_t r = 0; r < n; ++r)
                for (const OwnedRange& o : part.owned[size_t(r)]) {
                    const ParamInfo& p = table.params[o.param];
                    seen[o.param].resize(size_t(is_expert_bank(p) ? p.n_matrices() : 1), 0);
                    for (int64_t e = o.matrix_begin; e < o.matrix_end; ++e) seen[o.param][size_t(e)]++;
                    CHECK(last_rank[o.param] < r);  // ranges of one tensor ascend with the rank
                    last_rank[o.param] = r;
                    CHECK(o.state_bytes == optimizer_state_bytes(opt, ParamTable{{owned_param_info(p, o)}}));
                }
            for (const ParamInfo& p : table.params) {
                INFO(p.name);
                REQUIRE(seen[p.index].size() == size_t(is_expert_bank(p) ? p.n_matrices() : 1));
                for (int c : seen[p.index]) CHECK(c == 1);
                OwnedRange one{p.index, 0, 1, 0};
                const int64_t unit = optimizer_state_bytes(opt, ParamTable{{owned_param_info(p, one)}});
                (is_expert_bank(p) ? max_expert : max_dense) =
                    std::max(is_expert_bank(p) ? max_expert : max_dense, unit);
                total += optimizer_state_bytes(opt, ParamTable{{p}});
            }
            int64_t sum = 0;
            for (int64_t b : part.state_bytes) {
                sum += b;
                // each of the two cuts is within one unit of its even share
                CHECK(b <= total / n + max_dense + max_expert + 1);
            }
            CHECK(sum == total);
            const ZeroPartition again = zero_partition(table, opt, layout_of(n, 1));
            CHECK(again.state_bytes == part.state_bytes);  // deterministic, independent of the asking rank
        }
    }
}

TEST_CASE("ZeRO partition with expert parallelism: a rank owns experts of its own shard only") {
    const Config cfg = small_config();
    const ParamTable table = build_param_table(cfg.model);
    const ZeroPartition part = zero_partition(table, builtin_optimizer("adamw"), layout_of(4, 0, 2));
    std::vector<int> expert_owned(8, 0);
    for (int64_t r = 0; r < 4; ++r)
        for (const OwnedRange& o : part.owned[size_t(r)]) {
            const ParamInfo& p = table.params[o.param];
            if (!is_expert_bank(p)) continue;
            CHECK(o.matrix_begin / 4 == r % 2);  // shard r % 2 holds experts [4 (r % 2), 4 (r % 2) + 4)
            CHECK((o.matrix_end - 1) / 4 == r % 2);
            if (p.role == Role::EXPERT_W1)
                for (int64_t e = o.matrix_begin; e < o.matrix_end; ++e) expert_owned[size_t(e)]++;
        }
    for (int c : expert_owned) CHECK(c == 1);
    // the held bank of expert rank 1 starts at global expert 4
    const ParamTable held = held_param_table(table, layout_of(4, 1, 2));
    for (const ParamInfo& p : held.params)
        if (is_expert_bank(p)) {
            CHECK(p.n_matrices() == 4);
            CHECK(held_first_expert(table.params[p.index], p, layout_of(4, 1, 2)) == 4);
        }
    CHECK_THROWS_AS(zero_partition(table, builtin_optimizer("adamw"), layout_of(4, 0, 3)), Error);
}

TEST_CASE(
    "ZeRO-1 plan: each rank's state is the hand sum of its owned ranges (AdamW 8 B per parameter, "
    "SkewAdam's factored experts 4 (rows + cols) B per expert)") {
    const Config cfg = small_config();
    const ParamTable table = build_param_table(cfg.model);
    for (int64_t n : {2, 4}) {
        INFO("world size " << n);
        const OptimizerConfig adamw = builtin_optimizer("adamw");
        const MemoryPlan one = build_memory_plan(cfg, table, adamw, 1);
        int64_t sum = 0;
        for (int64_t r = 0; r < n; ++r) {
            const MemoryPlan p = build_memory_plan(cfg, table, adamw, 1, layout_of(n, r));
            const ZeroPartition part = zero_partition(table, adamw, layout_of(n, r));
            int64_t hand = 0;
            for (const OwnedRange& o : part.owned[size_t(r)])
                hand += 8 * (o.matrix_end - o.matrix_begin) * per_matrix(table.params[o.param]);
            CHECK(p.state_bytes == hand);
            sum += p.state_bytes;
            // ZeRO-1: weights and gradients whole on every rank
            CHECK(p.weights_bytes == one.weights_bytes);
            CHECK(p.grads_bytes == one.grads_bytes);
            CHECK(p.peak_bytes < one.peak_bytes);
        }
        CHECK(sum == 8 * table.total_numel());
        CHECK(sum == one.state_bytes);
        // SkewAdam: the expert banks' state is factored (no momentum): 4 (rows + cols) bytes per expert
        const OptimizerConfig skew = builtin_optimizer("skewadam");
        for (int64_t r = 0; r < n; ++r) {
            const ZeroPartition part = zero_partition(table, skew, layout_of(n, r));
            for (const OwnedRange& o : part.owned[size_t(r)]) {
                const ParamInfo& p = table.params[o.param];
                if (is_expert_bank(p))
                    CHECK(o.state_bytes == 4 * (o.matrix_end - o.matrix_begin) * (p.rows() + p.cols()));
            }
        }
    }
    // zero_stage 0: every rank keeps all the state
    ParallelLayout l0 = layout_of(2, 1);
    l0.zero_stage = 0;
    CHECK(build_memory_plan(cfg, table, builtin_optimizer("adamw"), 1, l0).state_bytes == 8 * table.total_numel());
    // expert parallel 2 on 2 ranks: each holds half the experts' weights, gradients and state
    ParallelLayout ep = layout_of(2, 0, 2);
    ep.zero_stage = 0;
    int64_t bank_numel = 0;
    for (const ParamInfo& p : table.params)
        if (is_expert_bank(p)) bank_numel += p.numel();
    const MemoryPlan pe = build_memory_plan(cfg, table, builtin_optimizer("adamw"), 1, ep);
    CHECK(pe.state_bytes == 8 * (table.total_numel() - bank_numel / 2));
    CHECK(pe.weights_bytes ==
          build_memory_plan(cfg, table, builtin_optimizer("adamw"), 1).weights_bytes - 2 * bank_numel / 2);
    // the microbatch divides the rank's share of the batch
    CHECK_THROWS_AS(build_memory_plan(cfg, table, builtin_optimizer("adamw"), 4, layout_of(2, 0)), Error);
}

TEST_CASE(
    "ZeRO-1 step in one process: N partitions stepped and gathered equal the one-process step bit for bit, "
    "every optimizer, 3 steps") {
    Config cfg = small_config();
    const ParamTable table = build_param_table(cfg.model);
    std::vector<OptimizerConfig> opts;
    for (const std::string& name : builtin_optimizer_names()) opts.push_back(builtin_optimizer(name));
    // SkewAdam with a full or no second moment on the experts tier clips the update RMS over the
    // whole bank: the partition keeps such a bank whole
    for (SecondMomentKind k : {SecondMomentKind::FULL, SecondMomentKind::NONE}) {
        OptimizerConfig o = builtin_optimizer("skewadam");
        o.name = fmt::format("skewadam-experts-{}", k);
        o.tiers[size_t(Tier::EXPERTS)].second_moment = k;
        o.tiers[size_t(Tier::EXPERTS)].momentum = MomentumKind::FP32;
        opts.push_back(o);
        const ZeroPartition part = zero_partition(table, o, layout_of(4, 0));
        for (const auto& mine : part.owned)
            for (const OwnedRange& r : mine)
                if (is_expert_bank(table.params[r.param])) {
                    CHECK(r.matrix_begin == 0);
                    CHECK(r.matrix_end == cfg.model.n_experts);
                }
        CHECK_THROWS_WITH(zero_partition(table, o, layout_of(4, 0, 2)), Catch::Contains("one W"));
    }
    for (OptimizerConfig opt : opts) {
        const std::string name = opt.name;
        opt.rank = 4;
        opt.update_proj_gap = 2;  // GaLore refreshes its projectors within the test
        for (int64_t n : {2, 4}) {
            INFO(name << " world size " << n);
            Rank ref(cfg, table, opt, layout_of(1, 0));
            std::vector<std::unique_ptr<Rank>> ranks;
            for (int64_t r = 0; r < n; ++r) ranks.push_back(std::make_unique<Rank>(cfg, table, opt, layout_of(n, r)));
            for (int64_t s = 1; s <= 3; ++s) {
                const OptimStep st{s, 1e-2, 42};
                ref.gradients(s);
                optimizer_step(opt, ref.slots.owned, st);
                for (auto& rk : ranks) {
                    rk->gradients(s);
                    optimizer_step(opt, rk->slots.owned, st);
                }
                // the all-gather: each owner's ranges to every rank
                for (int64_t r = 0; r < n; ++r)
                    for (const OwnedRange& o : ranks[size_t(r)]->part.owned[size_t(r)]) {
                        const ParamInfo& p = table.params[o.param];
                        const int64_t b = dtype_bytes(p.dtype) * per_matrix(p);
                        for (auto& other : ranks)
                            std::memcpy(static_cast<char*>(other->slots.whole[o.param].weight) + o.matrix_begin * b,
                                        static_cast<const char*>(ranks[size_t(r)]->slots.whole[o.param].weight) +
                                            o.matrix_begin * b,
                                        size_t((o.matrix_end - o.matrix_begin) * b));
                    }
            }
            int64_t moved = 0;
            for (const ParamInfo& p : table.params) {
                INFO(p.name);
                const void* w = ref.slots.whole[p.index].weight;
                for (int64_t k = 0; k < p.numel() && moved == 0; ++k) {
                    const float now = p.dtype == DType::F32 ? static_cast<const float*>(w)[k]
                                                            : bf16_to_f32(static_cast<const bf16*>(w)[k]);
                    const float was =
                        p.dtype == DType::F32 ? value(p.index, k, 0) : bf16_to_f32(f32_to_bf16(value(p.index, k, 0)));
                    moved += now != was;
                }
                for (auto& rk : ranks) CHECK(std::memcmp(rk->slots.whole[p.index].weight, w, size_t(p.bytes())) == 0);
            }
            CHECK(moved > 0);  // the steps changed the weights
            // each owned range's state equals the matching slice of the one-process state
            for (int64_t r = 0; r < n; ++r) {
                const Rank& rk = *ranks[size_t(r)];
                for (size_t i = 0; i < rk.slots.owned.size(); ++i) {
                    const OwnedRange& o = rk.part.owned[size_t(r)][i];
                    const ParamInfo& p = table.params[o.param];
                    const ParamSlot& whole_ref = ref.slots.owned[o.param];
                    for (const StateSlotSpec& spec : optimizer_param_state(opt, p)) {
                        INFO(p.name << " state " << choice_name(spec.kind));
                        const int64_t per = spec.numel() / (is_expert_bank(p) ? p.n_matrices() : 1);
                        const float* mine = rk.slots.owned[i].st(spec.kind);
                        REQUIRE(mine != nullptr);
                        CHECK(std::memcmp(mine, whole_ref.st(spec.kind) + o.matrix_begin * per,
                                          size_t((o.matrix_end - o.matrix_begin) * per) * 4) == 0);
                    }
                }
            }
        }
    }
}
