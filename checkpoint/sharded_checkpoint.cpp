// Sharded checkpoints, their layout manifest and the merged export (checkpoint/sharded_checkpoint.h).
#include "checkpoint/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>

#include "checkpoint/run_folder.h"
#include "checkpoint/tensor_scan.h"
#include "engine/error.h"
#include "engine/json_strict.h"

namespace fs = std::filesystem;

namespace skew {
namespace {

/// Every rank reports whether its part succeeded; a rank that failed rethrows its own error, the
/// others fail naming the rank(s) that did (no rank waits for one that gave up).
void agree(Communicator& comm, const std::string& what, std::exception_ptr err) {
    std::vector<int64_t> failed(size_t(comm.world_size()), 0);
    failed[size_t(comm.rank())] = err ? 1 : 0;
    comm.allreduce_sum(failed.data(), int64_t(failed.size()), CommDType::I64);
    if (err) std::rethrow_exception(err);
    std::string ranks;
    for (size_t r = 0; r < failed.size(); ++r)
        if (failed[r]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (!ranks.empty()) fail("{}: rank {} failed (its error is above); this rank stops too", what, ranks);
}

template <class F>
std::exception_ptr attempt(F&& f) {
    try {
        f();
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

bool is_bank_name(const ParamTable& table, const std::string& name) {
    const ParamInfo* p = table.find(name);
    return p && is_expert_bank(*p);
}

/// The weights of the arena split into the non-expert ones and the expert banks.
void split_weights(const std::vector<NamedTensor>& all, const ParamTable& table, std::vector<NamedTensor>& dense,
                   std::vector<NamedTensor>& banks) {
    for (const NamedTensor& t : all) (is_bank_name(table, t.name) ? banks : dense).push_back(t);
}

nlohmann::json layout_json(const ParallelLayout& l) {
    return {{"world_size", l.world_size}, {"expert_parallel", l.expert_parallel}, {"zero_stage", l.zero_stage}};
}

/// Which part of a rank's optimizer state a state file holds.
enum class StatePart { ALL, NON_EXPERT, EXPERTS };

}  // namespace

/// A state part as the checkpoint's manifest spells it ("holds").
template <>
struct ChoiceNames<StatePart> {
    static constexpr std::array<std::pair<StatePart, std::string_view>, 3> items{
        {{StatePart::ALL, "all"}, {StatePart::NON_EXPERT, "non-expert"}, {StatePart::EXPERTS, "experts"}}};
};

namespace {

/// One optimizer-state file of a checkpoint: written by `rank`, holding `part` of its state.
struct StateShard {
    int64_t rank = 0;
    std::string file;
    StatePart part = StatePart::ALL;
};

/// The state files of a checkpoint of layout `l`, each written once:
///  - ZeRO-1: every rank its owned state, optimizer.rank-R-of-N;
///  - stage 0 without expert parallelism: rank 0's whole (replicated) state, optimizer.safetensors;
///  - stage 0 with expert parallelism M: the replicated non-expert state once (rank 0,
///    optimizer.safetensors) and each expert shard's bank state once (its first replica, rank E:
///    optimizer.experts-E-of-M.safetensors).
std::vector<StateShard> state_shards(const ParallelLayout& l) {
    std::vector<StateShard> out;
    if (l.zero()) {
        for (int64_t r = 0; r < l.world_size; ++r)
            out.push_back({r, CheckpointFolder::optimizer_shard_file(r, l.world_size), StatePart::ALL});
    } else if (l.expert_parallel == 1) {
        out.push_back({0, CheckpointFolder::OPTIMIZER_FILE, StatePart::ALL});
    } else {
        out.push_back({0, CheckpointFolder::OPTIMIZER_FILE, StatePart::NON_EXPERT});
        for (int64_t er = 0; er < l.expert_parallel; ++er)
            out.push_back({er, CheckpointFolder::expert_state_shard_file(er, l.expert_parallel), StatePart::EXPERTS});
    }
    return out;
}

/// Whether rank l.rank's state (that part of it) is the one in shard `s`: its own file under
/// ZeRO-1; the replicated state of stage 0; the bank state of its expert shard.
bool reads_shard(const ParallelLayout& l, const StateShard& s) {
    if (l.zero()) return s.rank == l.rank;
    if (s.part == StatePart::EXPERTS) return s.rank == l.expert_rank();
    return true;
}

bool part_holds(StatePart part, bool bank) { return part == StatePart::ALL || (part == StatePart::EXPERTS) == bank; }

nlohmann::json owned_json(const ZeroPartition& part, const ParamTable& global, int64_t rank,
                          StatePart which = StatePart::ALL) {
    nlohmann::json a = nlohmann::json::array();
    for (const OwnedRange& o : part.owned[size_t(rank)]) {
        const ParamInfo& p = global.params[o.param];
        if (!part_holds(which, is_expert_bank(p))) continue;
        if (is_expert_bank(p)) a.push_back({{"param", p.name}, {"experts", {o.matrix_begin, o.matrix_end}}});
        else a.push_back({{"param", p.name}});
    }
    return a;
}

/// The arena's optimizer-state tensors (plan names) that `part` holds: a state buffer belongs to
/// the parameter of global index BufferSpec::param. Throws skew::Error on a state buffer whose
/// parameter is not in `global`.
std::vector<NamedTensor> state_tensors(const Arena& arena, Backend* backend, const ParamTable& global, StatePart part) {
    std::vector<NamedTensor> all = buffer_tensors(arena, BufferKind::STATE, backend);
    if (part == StatePart::ALL) return all;
    std::map<std::string, bool> bank_of;  // state buffer name -> belongs to an expert bank
    for (const BufferSpec& b : arena.plan->buffers) {
        if (b.kind != BufferKind::STATE) continue;
        const ParamInfo* p = nullptr;
        for (const ParamInfo& q : global.params)
            if (int64_t(q.index) == int64_t(b.param)) p = &q;
        if (!p) fail("optimizer state '{}': belongs to no parameter of the model's table (index {})", b.name, b.param);
        bank_of[b.name] = is_expert_bank(*p);
    }
    std::vector<NamedTensor> out;
    for (NamedTensor& t : all)
        if (part_holds(part, bank_of.at(t.name))) out.push_back(std::move(t));
    return out;
}

std::vector<std::byte> read_bytes_at(const std::string& path, int64_t offset, int64_t bytes) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open", path);
    std::vector<std::byte> out(static_cast<size_t>(bytes));
    in.seekg(offset);
    in.read(reinterpret_cast<char*>(out.data()), bytes);
    if (!in) fail("{}: cannot read {} bytes at offset {}", path, bytes, offset);
    return out;
}

/// Every tensor of a safetensors file into host memory, by name.
std::map<std::string, HostTensor> read_all(const std::string& path) {
    const SafetensorsHeader h = read_safetensors_header(path);
    std::map<std::string, HostTensor> out;
    for (const SafetensorsEntry& e : h.tensors) {
        if (!e.dtype_known)
            fail("{}: tensor '{}' is {}, not a dtype skew writes (BF16, F32, I32, U16)", path, e.name, e.dtype_name);
        HostTensor t;
        t.name = e.name;
        t.dtype = e.dtype;
        t.shape = e.shape;
        t.data = read_bytes_at(path, h.data_start + e.begin, e.end - e.begin);
        out.emplace(e.name, std::move(t));
    }
    return out;
}

}  // namespace

bool checkpoint_is_sharded(const std::string& dir) {
    std::error_code ec;
    return fs::exists(CheckpointFolder{dir}.layout(), ec);
}

int64_t checkpoint_world_size(const std::string& dir) {
    if (!checkpoint_exists(dir)) return 0;
    if (!checkpoint_is_sharded(dir)) return 1;
    const std::string layout_path = CheckpointFolder{dir}.layout();
    const nlohmann::json m = read_json_file(layout_path);
    if (!m.is_object() || !m.contains("layout") || !m["layout"].is_object())
        fail("{}: no valid layout (no 'layout' object)", layout_path);
    const int64_t world = json_int_or(m["layout"], "world_size", 0, layout_path + " layout");
    if (world < 1) fail("{}: no valid layout (world_size {}: missing or out of range)", layout_path, world);
    return world;
}

void save_sharded_checkpoint(const std::string& dir, const Arena& arena, const TrainerState& state, Backend* backend,
                             const ParallelLayout& layout, const ZeroPartition& part, const ParamTable& global,
                             Communicator& comm) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    if (comm.device_memory()) fail("{}: sharded checkpoints coordinate over a host communicator", dir);
    const std::string tag = fmt::format("sharded-{}", state.step);
    std::string temp;
    // 1. rank 0 prepares the temporary folder (every rank writes into the same one: shared storage)
    agree(comm, fmt::format("{}: preparing the checkpoint", dir), attempt([&] {
              if (layout.rank == 0) begin_checkpoint_folder(dir, tag);
          }));
    {
        fs::path target = fs::path(dir).lexically_normal();
        if (target.filename().empty()) target = target.parent_path();
        temp = (target.parent_path() / fmt::format(".{}.tmp-{}", target.filename().string(), tag)).string();
    }
    const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                     {"step", std::to_string(state.step)},
                                                     {"optimizer", state.optimizer},
                                                     {"world_size", std::to_string(layout.world_size)},
                                                     {"rank", std::to_string(layout.rank)}};
    // 2. every rank its files
    agree(comm, fmt::format("{}: writing the shards", dir), attempt([&] {
              for (const StateShard& sh : state_shards(layout))
                  if (sh.rank == layout.rank)
                      write_safetensors(CheckpointFolder{temp}.file(sh.file),
                                        state_tensors(arena, backend, global, sh.part), meta);
              const std::vector<NamedTensor> weights = weight_tensors(arena, backend);
              if (layout.expert_parallel == 1) {
                  if (layout.rank == 0) write_safetensors(CheckpointFolder{temp}.weights(), weights, meta);
                  return;
              }
              std::vector<NamedTensor> dense, banks;
              split_weights(weights, global, dense, banks);
              if (layout.rank == 0) write_safetensors(CheckpointFolder{temp}.weights(), dense, meta);
              if (layout.expert_replica() == 0)
                  write_safetensors(CheckpointFolder{temp}.file(CheckpointFolder::expert_shard_file(
                                        layout.expert_rank(), layout.expert_parallel)),
                                    banks, meta);
          }));
    // 3. rank 0: the trainer state and the manifest last, then the swap
    agree(comm, fmt::format("{}: completing the checkpoint", dir), attempt([&] {
              if (layout.rank != 0) return;
              nlohmann::json m;
              m["format"] = "skew-sharded-checkpoint-1";
              m["step"] = state.step;
              m["optimizer"] = state.optimizer;
              m["layout"] = layout_json(layout);
              m["model"] = CheckpointFolder::WEIGHTS_FILE;
              nlohmann::json experts = nlohmann::json::array();
              if (layout.expert_parallel > 1)
                  for (int64_t er = 0; er < layout.expert_parallel; ++er)
                      experts.push_back(CheckpointFolder::expert_shard_file(er, layout.expert_parallel));
              m["expert_shards"] = experts;
              nlohmann::json shards = nlohmann::json::array();
              for (const StateShard& sh : state_shards(layout))
                  shards.push_back({{"rank", sh.rank},
                                    {"file", sh.file},
                                    {"holds", std::string(choice_name(sh.part))},
                                    {"owned", owned_json(part, global, sh.rank, sh.part)}});
              m["optimizer_shards"] = shards;
              write_file_atomic(CheckpointFolder{temp}.trainer_state(), json_text(trainer_state_to_json(state)) + "\n");
              write_file_atomic(CheckpointFolder{temp}.layout(), json_text(m) + "\n");
              commit_checkpoint_folder(temp, dir);
          }));
}

TrainerState load_sharded_checkpoint(const std::string& dir, const Arena& arena, Backend* backend,
                                     const ParallelLayout& layout, const ZeroPartition& part, const ParamTable& global,
                                     Communicator& comm) {
    if (!arena.plan) fail("{}: the arena has no memory plan", dir);
    TrainerState s;
    agree(
        comm, fmt::format("{}: loading the checkpoint", dir), attempt([&] {
            const CheckpointFolder d{dir};
            const std::string layout_path = d.layout();
            std::error_code ec;
            if (!fs::exists(layout_path, ec)) {
                if (checkpoint_exists(dir))
                    fail(
                        "{}: the checkpoint was written by one process (world size 1, no {}); this run is {}: resume "
                        "it with one process, or start a new run",
                        dir, CheckpointFolder::LAYOUT_FILE, layout.describe());
                fail("{}: no checkpoint here ({} is missing)", dir, layout_path);
            }
            const nlohmann::json m = read_json_file(layout_path);
            if (!m.is_object() || !m.contains("layout") || !m["layout"].is_object())
                fail("{}: no valid layout (no 'layout' object)", layout_path);
            ParallelLayout was;
            const std::string where = layout_path + " layout";
            was.world_size = json_int_or(m["layout"], "world_size", 0, where);
            was.expert_parallel = json_int_or(m["layout"], "expert_parallel", 0, where);
            was.zero_stage = json_int_or(m["layout"], "zero_stage", -1, where);
            if (was.world_size < 1 || was.expert_parallel < 1 || was.zero_stage < 0)
                fail("{}: no valid layout (world_size {}, expert_parallel {}, zero_stage {}: missing or out of range)",
                     layout_path, was.world_size, was.expert_parallel, was.zero_stage);
            if (was.world_size != layout.world_size || was.expert_parallel != layout.expert_parallel ||
                was.zero_stage != layout.zero_stage)
                fail(
                    "{}: the checkpoint was written with {}; this run is {}: resume with the same layout (mpirun -np "
                    "{}, parallel.expert {}, parallel.zero_stage {}), or `skew export` its weights",
                    dir, was.describe(), layout.describe(), was.world_size, was.expert_parallel, was.zero_stage);
            // the owned ranges must be the ones this build computes (the partition is part of the format)
            const std::vector<StateShard> mine = [&] {
                std::vector<StateShard> v;
                for (const StateShard& sh : state_shards(layout))
                    if (reads_shard(layout, sh)) v.push_back(sh);
                return v;
            }();
            const nlohmann::json listed = m.value("optimizer_shards", nlohmann::json::array());
            for (const StateShard& sh : mine) {
                bool found = false;
                for (const auto& e : listed)
                    if (e.is_object() && json_string_or(e, "file", "", layout_path + " optimizer_shards") == sh.file) {
                        found = true;
                        if (json_int_or(e, "rank", -1, layout_path + " optimizer_shards") != sh.rank ||
                            e.value("owned", nlohmann::json()) != owned_json(part, global, sh.rank, sh.part))
                            fail(
                                "{}: {} holds other parameter ranges than this run's partition of the optimizer "
                                "state for rank {} (another parameter table or optimizer)",
                                layout_path, sh.file, sh.rank);
                    }
                if (!found)
                    fail("{}: lists no optimizer state file {} (rank {}'s state)", layout_path, sh.file, sh.rank);
            }

            const std::string state_path = d.trainer_state();
            s = trainer_state_from_json(read_json_file(state_path), state_path);
            if (s.optimizer != arena.plan->optimizer)
                fail("{}: checkpoint of optimizer '{}' cannot be loaded into a run of optimizer '{}'", state_path,
                     s.optimizer, arena.plan->optimizer);
            auto load = [&](const std::string& file, const std::vector<NamedTensor>& tensors) {
                const std::string path = d.file(file);
                auto meta = read_safetensors_into(path, tensors);
                auto it = meta.find("step");
                if (it == meta.end()) fail("{}: metadata has no 'step'", path);
                if (it->second != std::to_string(s.step))
                    fail("{}: written at step {} but {} says step {}: the folder mixes two saves", path, it->second,
                         state_path, s.step);
                if (const auto bad = first_non_finite(tensors))
                    fail("{}: tensor '{}' holds a non-finite value at element {}: the checkpoint is corrupt", path,
                         bad->tensor, bad->index);
            };
            const std::vector<NamedTensor> weights = weight_tensors(arena, backend);
            if (layout.expert_parallel == 1) {
                load(CheckpointFolder::WEIGHTS_FILE, weights);
            } else {
                std::vector<NamedTensor> dense, banks;
                split_weights(weights, global, dense, banks);
                load(CheckpointFolder::WEIGHTS_FILE, dense);
                load(CheckpointFolder::expert_shard_file(layout.expert_rank(), layout.expert_parallel), banks);
            }
            for (const StateShard& sh : mine) load(sh.file, state_tensors(arena, backend, global, sh.part));
        }));
    return s;
}

std::vector<HostTensor> read_checkpoint_weights(const std::string& dir, const ParamTable& table) {
    const CheckpointFolder d{dir};
    std::map<std::string, HostTensor> all = read_all(d.weights());
    if (checkpoint_is_sharded(dir)) {
        const std::string layout_path = d.layout();
        const nlohmann::json m = read_json_file(layout_path);
        if (!m.is_object()) fail("{}: not a JSON object", layout_path);
        const nlohmann::json shards = m.contains("expert_shards") ? m["expert_shards"] : nlohmann::json::array();
        if (!shards.is_array()) fail("{}: expert_shards is not a list of file names", layout_path);
        if (!shards.empty()) {
            // concatenate each bank's shards in expert order (a bank is stored expert-major)
            std::vector<std::map<std::string, HostTensor>> parts;
            for (const auto& f : shards) {
                if (!f.is_string()) fail("{}: expert_shards holds a non-string entry", layout_path);
                parts.push_back(read_all(d.file(f.get<std::string>())));
            }
            for (const ParamInfo& p : table.params) {
                if (!is_expert_bank(p)) continue;
                HostTensor whole;
                whole.name = p.name;
                whole.dtype = p.dtype;
                whole.shape = p.shape;
                int64_t experts = 0;
                for (size_t i = 0; i < parts.size(); ++i) {
                    auto it = parts[i].find(p.name);
                    if (it == parts[i].end())
                        fail("{}: tensor '{}' is missing", d.file(shards[i].get<std::string>()), p.name);
                    experts += it->second.shape.empty() ? 0 : it->second.shape[0];
                    whole.data.insert(whole.data.end(), it->second.data.begin(), it->second.data.end());
                }
                if (experts != p.n_matrices())
                    fail("{}: the expert shards of '{}' hold {} experts, the model has {}", dir, p.name, experts,
                         p.n_matrices());
                all[p.name] = std::move(whole);
            }
        }
    }
    std::vector<HostTensor> out;
    for (const ParamInfo& p : table.params) {
        auto it = all.find(p.name);
        if (it == all.end()) fail("{}: the checkpoint has no weight '{}'", dir, p.name);
        HostTensor& t = it->second;
        if (t.dtype != p.dtype || t.shape != p.shape || int64_t(t.data.size()) != p.numel() * dtype_bytes(p.dtype))
            fail("{}: weight '{}' is {} {}, the model's is {} {}", dir, p.name, choice_name(t.dtype),
                 fmt::format("{}", fmt::join(t.shape, "x")), choice_name(p.dtype),
                 fmt::format("{}", fmt::join(p.shape, "x")));
        out.push_back(std::move(t));
        all.erase(it);
    }
    if (!all.empty()) fail("{}: the checkpoint holds a weight '{}' the model does not have", dir, all.begin()->first);
    return out;
}

void export_checkpoint_weights(const std::string& dir, const ParamTable& table, const std::string& out_path) {
    std::vector<HostTensor> w = read_checkpoint_weights(dir, table);
    const std::string state_path = CheckpointFolder{dir}.trainer_state();
    const TrainerState s = trainer_state_from_json(read_json_file(state_path), state_path);
    std::vector<NamedTensor> named;
    for (HostTensor& t : w) {
        NamedTensor n;
        n.name = t.name;
        n.dtype = t.dtype;
        n.shape = t.shape;
        n.data = t.data.data();
        named.push_back(n);
    }
    write_safetensors(out_path, named,
                      {{"format", "pt"}, {"step", std::to_string(s.step)}, {"optimizer", s.optimizer}});
}

}  // namespace skew
