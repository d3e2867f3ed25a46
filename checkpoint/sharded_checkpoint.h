// Checkpoints of a run over several ranks (docs/distributed.md, "Checkpoints and export"): each
// rank writes its optimizer-state shard, the weights are written once (rank 0; with expert
// parallelism each expert shard once), and rank 0 writes the layout manifest (layout.json: world
// size, expert parallelism, ZeRO stage, who owns what) last, after every rank's files are there,
// then swaps the folder in (checkpoint/checkpoint.h; checkpoint/run_folder.h names the files).
// Resume needs the same layout. `skew export` merges the weights into one file in the
// single-process format.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "dist/communicator.h"
#include "engine/arena.h"
#include "engine/parallel_layout.h"
#include "optim/zero_partition.h"

namespace skew {

/// Whether the checkpoint folder `dir` is sharded (holds layout.json).
bool checkpoint_is_sharded(const std::string& dir);

/// The world size that wrote the checkpoint in `dir`: layout.json's world_size for a sharded one, 1
/// for one written by one process, 0 when `dir` holds no checkpoint. Throws skew::Error naming
/// layout.json when it holds no valid world size.
int64_t checkpoint_world_size(const std::string& dir);

/// Save the checkpoint of a run laid out by `layout` (this rank's) into `dir`, collectively: rank 0
/// prepares the hidden temporary folder; every rank writing state writes its shard (under ZeRO-1
/// every rank its owned state; under stage 0 rank 0 the replicated state, with expert parallelism
/// its non-expert part, and the first replica of each expert shard that shard's bank state); rank 0
/// writes model.safetensors (every weight; with expert parallelism the non-expert weights) and the
/// first replica of each expert shard its bank weights; after every rank reported success rank 0
/// writes trainer_state.json and layout.json and swaps the folder in. `part` is the partition the
/// run uses (zero_partition of the global table), `comm` a host-memory communicator of the run's
/// ranks. A failure on any rank fails every rank, naming the rank(s); `dir` is then unchanged.
void save_sharded_checkpoint(const std::string& dir, const Arena& arena, const TrainerState& state, Backend* backend,
                             const ParallelLayout& layout, const ZeroPartition& part, const ParamTable& global,
                             Communicator& comm);

/// Load a sharded checkpoint into this rank's arena (the non-expert weights, its expert shard's
/// bank weights, the state of its shard: its own under ZeRO-1, else the replicated non-expert state
/// and its expert shard's bank state) and
/// return the trainer state. Refuses, naming both layouts, a checkpoint written with another world
/// size, expert parallelism or ZeRO stage (or other owned ranges), and like load_checkpoint a
/// missing or corrupt file, a file of another step or optimizer, a non-finite value. Collective:
/// a failure on any rank fails every rank, naming the rank(s).
TrainerState load_sharded_checkpoint(const std::string& dir, const Arena& arena, Backend* backend,
                                     const ParallelLayout& layout, const ZeroPartition& part, const ParamTable& global,
                                     Communicator& comm);

/// A weight tensor in host memory.
struct HostTensor {
    std::string name;
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;
    std::vector<std::byte> data;
};

/// Every weight of the checkpoint in `dir` (sharded or single-process) in the single-process form:
/// named by `table` (the model's global table), in table order, expert banks whole (the expert
/// shards concatenated in expert order). Throws skew::Error naming the file and tensor on a
/// missing, corrupt or mismatched file.
std::vector<HostTensor> read_checkpoint_weights(const std::string& dir, const ParamTable& table);

/// Write read_checkpoint_weights(dir, table) to `out_path` as one safetensors file (metadata
/// format pt, step, optimizer), durably: the file `load_checkpoint`'s and `skew eval`'s reader loads.
void export_checkpoint_weights(const std::string& dir, const ParamTable& table, const std::string& out_path);

}  // namespace skew
