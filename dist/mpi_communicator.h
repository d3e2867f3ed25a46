// The MPI implementation of Communicator over host memory (docs/distributed.md): MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather(v), MPI_Alltoallv, MPI_Bcast, MPI_Comm_split of Open MPI.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace skew {

/// A communicator over MPI_COMM_WORLD (a duplicate, so the run's traffic is its own). MPI must be
/// initialized (dist/launch.h) and stay so while the communicator lives. Errors of any MPI call
/// return to the caller (MPI_ERRORS_RETURN) and are thrown as skew::Error naming the call and
/// the rank.
std::unique_ptr<Communicator> make_mpi_world_communicator();

}  // namespace skew
