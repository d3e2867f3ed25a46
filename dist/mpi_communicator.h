// The MPI implementation of Communicator over host memory (docs/distributed.md): MPI_Allreduce,
// MPI_Iallreduce (start_allreduce_sum) with MPI_Testall / MPI_Waitall, MPI_Reduce_scatter_block,
// MPI_Allgather(v), MPI_Alltoallv, MPI_Bcast, MPI_Comm_split of Open MPI.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace skew {

/// Elements per MPI call of the MPI communicator (MPI 3.1 counts are int; 2^30 leaves margin).
constexpr int64_t MPI_MAX_CHUNK_ELEMENTS = int64_t(1) << 30;

/// A communicator over MPI_COMM_WORLD (a duplicate, so the run's traffic is its own). MPI must be
/// initialized (dist/launch.h) and stay so while the communicator lives. Errors of any MPI call
/// return to the caller (MPI_ERRORS_RETURN) and are thrown as skew::Error naming the call and
/// the rank. max_chunk_elements: the most elements one MPI call moves; larger counts are split
/// (tests pass a small value to exercise the split with small buffers), in [1, MPI_MAX_CHUNK_ELEMENTS].
std::unique_ptr<Communicator> make_mpi_world_communicator(int64_t max_chunk_elements = MPI_MAX_CHUNK_ELEMENTS);

}  // namespace skew
