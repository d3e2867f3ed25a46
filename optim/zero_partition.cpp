// ZeRO-1 ownership of the optimizer state (optim/zero_partition.h): a contiguous cut of the
// parameter sequence by state bytes, whole matrices or whole experts (docs/distributed.md).
#include "optim/zero_partition.h"

#include <algorithm>

#include "engine/arena.h"
#include "engine/error.h"

namespace skew {
namespace {

struct Unit {
    uint32_t param;
    int64_t begin, end;  // experts [begin, end) of a bank (global), [0, 1) for another tensor
    int64_t bytes;       // state bytes
};

/// Whether a bank's update is per expert matrix under `opt`, so that a range of experts can be
/// stepped on its own. SkewAdam with a full or no second moment on the experts tier clips the
/// update RMS over the whole tensor (one W, optim/skewadam.cpp), so such a bank is one unit.
bool per_expert_update(const OptimizerConfig& opt, const ParamInfo& p) {
    const ParamPolicy pol = param_policy(opt, p);
    if (pol.kind == OptimizerType::SKEWADAM || pol.kind == OptimizerType::ADAFACTOR)
        return pol.second_moment == SecondMomentKind::FACTORED;
    return true;
}

/// Cut `units` into `ranks` contiguous runs by bytes (the midpoint rule of zero_partition) and
/// append each to owned[rank_of(run)], merging consecutive experts of one bank into one range.
template <class RankOf>
void cut(const std::vector<Unit>& units, int64_t ranks, RankOf rank_of, ZeroPartition& part) {
    __int128 total = 0;
    for (const Unit& u : units) total += u.bytes;
    const bool by_count = total == 0;  // no state at all: spread the units evenly by count
    if (by_count) total = __int128(units.size());
    __int128 before = 0;
    for (const Unit& u : units) {
        const __int128 w = by_count ? 1 : u.bytes;
        int64_t r = total > 0 ? int64_t((2 * before + w) * ranks / (2 * total)) : 0;
        r = std::clamp<int64_t>(r, 0, ranks - 1);
        before += w;
        std::vector<OwnedRange>& mine = part.owned[size_t(rank_of(r))];
        if (!mine.empty() && mine.back().param == u.param && mine.back().matrix_end == u.begin) {
            mine.back().matrix_end = u.end;
            mine.back().state_bytes += u.bytes;
        } else {
            mine.push_back({u.param, u.begin, u.end, u.bytes});
        }
    }
}

}  // namespace

int64_t ZeroPartition::largest_rank() const {
    int64_t best = 0;
    for (size_t r = 1; r < state_bytes.size(); ++r)
        if (state_bytes[r] > state_bytes[size_t(best)]) best = int64_t(r);
    return best;
}

ZeroPartition zero_partition(const ParamTable& table, const OptimizerConfig& opt, const ParallelLayout& layout) {
    const int64_t N = layout.world_size, M = layout.expert_parallel;
    if (N < 1 || M < 1 || N % M != 0) fail("ZeRO partition: expert parallelism {} must divide the world size {}", M, N);
    ZeroPartition part;
    part.world_size = N;
    part.expert_parallel = M;
    part.zero_stage = layout.zero_stage;
    part.owned.assign(size_t(N), {});
    part.state_bytes.assign(size_t(N), 0);
    const bool zero = layout.zero();
    const int64_t D = N / M;  // replicas of each expert shard

    std::vector<Unit> dense;
    std::vector<std::vector<Unit>> shards(static_cast<size_t>(M));  // per expert rank
    for (const ParamInfo& p : table.params) {
        if (!is_expert_bank(p)) {
            dense.push_back({p.index, 0, 1, optimizer_state_bytes(opt, ParamTable{{p}})});
            continue;
        }
        const int64_t E = p.n_matrices();
        if (E % M != 0)
            fail("ZeRO partition: expert parallelism {} does not divide the {} experts of '{}'", M, E, p.name);
        const int64_t per_shard = E / M;
        if (!per_expert_update(opt, p)) {
            if (M > 1)
                fail(
                    "optimizer '{}': expert parallelism needs a per-expert update, but '{}' is updated as one W (a "
                    "full or no second moment on the experts tier clips the whole bank); use a factored second "
                    "moment there or parallel.expert: 1",
                    opt.name, p.name);
            dense.push_back({p.index, 0, E, optimizer_state_bytes(opt, ParamTable{{p}})});  // the whole bank, one unit
            continue;
        }
        OwnedRange one{p.index, 0, 1, 0};
        const int64_t bytes = optimizer_state_bytes(opt, ParamTable{{owned_param_info(p, one)}});
        for (int64_t e = 0; e < E; ++e) shards[size_t(e / per_shard)].push_back({p.index, e, e + 1, bytes});
    }
    if (zero) {
        cut(
            dense, N, [](int64_t r) { return r; }, part);
        for (int64_t er = 0; er < M; ++er)
            cut(
                shards[size_t(er)], D, [&](int64_t rep) { return rep * M + er; }, part);
        // keep each rank's list in table order (dense and expert ranges interleave in the table)
        for (auto& mine : part.owned)
            std::stable_sort(mine.begin(), mine.end(), [](const OwnedRange& a, const OwnedRange& b) {
                return a.param != b.param ? a.param < b.param : a.matrix_begin < b.matrix_begin;
            });
    } else {
        for (int64_t r = 0; r < N; ++r) {
            cut(
                dense, 1, [&](int64_t) { return r; }, part);
            cut(
                shards[size_t(r % M)], 1, [&](int64_t) { return r; }, part);
            std::stable_sort(part.owned[size_t(r)].begin(), part.owned[size_t(r)].end(),
                             [](const OwnedRange& a, const OwnedRange& b) { return a.param < b.param; });
        }
    }
    for (int64_t r = 0; r < N; ++r)
        for (const OwnedRange& o : part.owned[size_t(r)]) part.state_bytes[size_t(r)] += o.state_bytes;
    return part;
}

ParamInfo owned_param_info(const ParamInfo& p, const OwnedRange& r) {
    ParamInfo o = p;
    if (is_expert_bank(p)) o.shape = {r.matrix_end - r.matrix_begin, p.rows(), p.cols()};
    return o;
}

ParamTable owned_param_table(const ParamTable& table, const ZeroPartition& part, int64_t rank) {
    if (rank < 0 || rank >= int64_t(part.owned.size()))
        fail("ZeRO partition: rank {} is outside world size {}", rank, part.owned.size());
    ParamTable out;
    for (const OwnedRange& r : part.owned[size_t(rank)]) {
        if (r.param >= table.params.size())
            fail("ZeRO partition: parameter index {} is outside the table of {}", r.param, table.params.size());
        out.params.push_back(owned_param_info(table.params[r.param], r));
    }
    return out;
}

ParamTable held_param_table(const ParamTable& table, const ParallelLayout& layout) {
    ParamTable out = table;
    if (layout.expert_parallel == 1) return out;
    for (ParamInfo& p : out.params) {
        if (!is_expert_bank(p)) continue;
        if (p.n_matrices() % layout.expert_parallel != 0)
            fail("expert parallelism {} does not divide the {} experts of '{}'", layout.expert_parallel, p.n_matrices(),
                 p.name);
        p.shape[0] = p.n_matrices() / layout.expert_parallel;
    }
    return out;
}

int64_t held_first_expert(const ParamInfo& global, const ParamInfo& held, const ParallelLayout& layout) {
    if (!is_expert_bank(global) || held.n_matrices() == global.n_matrices()) return 0;
    return layout.expert_rank() * held.n_matrices();
}

ParamSlot owned_slot(const ParamSlot& whole, const ParamInfo& owned, const OwnedRange& r, int64_t first_held) {
    ParamSlot s = whole;
    s.info = &owned;
    s.state.fill(nullptr);
    if (!is_expert_bank(owned)) return s;
    const int64_t per = owned.rows() * owned.cols();
    const int64_t local = r.matrix_begin - first_held;  // first owned expert in the held bank
    if (local < 0 || whole.info == nullptr || r.matrix_end - first_held > whole.info->n_matrices())
        fail("ZeRO partition: experts [{}, {}) of '{}' are not held by this rank (it holds {} from {})", r.matrix_begin,
             r.matrix_end, owned.name, whole.info ? whole.info->n_matrices() : 0, first_held);
    s.weight = static_cast<char*>(whole.weight) + local * per * dtype_bytes(owned.dtype);
    if (whole.grad) s.grad = static_cast<const char*>(whole.grad) + local * per * dtype_bytes(whole.grad_dtype);
    // the noise is keyed by the element's index in the global bank (the one-process step's)
    s.element_base = r.matrix_begin * per;
    return s;
}

ZeroSlots zero_arena_slots(const OptimizerConfig& opt, const ParamTable& held_table, const ParamTable& owned_table,
                           const ParallelLayout& layout, const ParamTable& global_table, const ZeroPartition& part,
                           const Arena& arena) {
    ZeroSlots out;
    out.whole = arena_weight_grad_slots(opt, held_table, arena);
    const auto& ranges = part.owned.at(size_t(layout.rank));
    if (ranges.size() != owned_table.params.size())
        fail("optimizer '{}': {} owned ranges for a table of {}", opt.name, ranges.size(), owned_table.params.size());
    size_t bound = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
        const OwnedRange& r = ranges[i];
        const ParamInfo& owned = owned_table.params[i];
        if (r.param >= held_table.params.size() || held_table.params[r.param].name != owned.name)
            fail("optimizer '{}': owned range {} is not parameter '{}' of the table", opt.name, i, owned.name);
        const int64_t first = held_first_expert(global_table.params[r.param], held_table.params[r.param], layout);
        ParamSlot s = owned_slot(out.whole[r.param], owned, r, first);
        for (const StateSlotSpec& spec : optimizer_param_state(opt, owned)) {
            const int b = arena.plan->state_of(owned.index, spec.kind);
            if (b < 0 || arena.plan->buffers[size_t(b)].numel() != spec.numel())
                fail(
                    "optimizer '{}': the memory plan has no {} state of {} values for '{}' (a plan for another "
                    "optimizer or layout)",
                    opt.name, choice_name(spec.kind), spec.numel(), owned.name);
            s.state[size_t(spec.kind)] = static_cast<float*>(arena.ptr(b));
            ++bound;
        }
        out.owned.push_back(s);
    }
    size_t planned = 0;
    for (const BufferSpec& b : arena.plan->buffers) planned += b.kind == BufferKind::STATE ? 1 : 0;
    if (planned != bound)
        fail(
            "optimizer '{}': the memory plan holds {} state tensors, this rank's ranges use {} (a plan for another "
            "optimizer or layout)",
            opt.name, planned, bound);
    return out;
}

}  // namespace skew
