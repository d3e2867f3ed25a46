// The process's place in a multi-rank run (docs/distributed.md): detection of a launch by mpirun
// or srun, MPI start-up and shutdown, rank, world size and local rank, the run's communicator,
// and the one way an error ends a multi-rank run (a line naming the rank, then MPI_Abort).
#pragma once
#include <memory>
#include <string>

#include "dist/communicator.h"
#include "engine/process_env.h"  // launched_by_mpi

namespace skew {

/// Where this process sits. Without a launcher: rank 0 of 1, no MPI.
struct LaunchInfo {
    bool mpi = false;  // launched by mpirun/srun: MPI is initialized and must be finalized
    int rank = 0;      // in MPI_COMM_WORLD
    int world_size = 1;
    int local_rank = 0;  // among the ranks on this node (MPI_Comm_split_type MPI_COMM_TYPE_SHARED)
    int local_size = 1;  // ranks on this node
};

/// Start MPI when launched_by_mpi() (MPI_Init_thread, MPI_THREAD_FUNNELED: only the main thread
/// calls MPI) and fill launch_info(); without a launcher, rank 0 of 1 and no MPI. Call once, early
/// in main (after any re-exec of the process). Throws skew::Error when MPI fails to start.
const LaunchInfo& launch_init(int* argc, char*** argv);

/// This process's LaunchInfo (rank 0 of 1 before launch_init).
const LaunchInfo& launch_info();

/// The run's communicator over every rank: MPI (host memory, dist/mpi_communicator.h) when
/// launched, else the one-process communicator. The same object on every call; lives until
/// launch_finalize.
Communicator& launch_world();

/// Shut MPI down (MPI_Finalize) when launch_init started it; frees launch_world() first. Safe
/// to call more than once.
void launch_finalize();

/// End the run because of an error on this rank: print "skew: error: rank R: <message>" (or
/// "skew: error: <message>" when not launched) on stderr, then, in a multi-rank run,
/// MPI_Abort(MPI_COMM_WORLD, exit_code) so every rank ends within seconds instead of waiting in a
/// collective for this one. Returns only when not launched by MPI (the caller then exits).
void launch_fail(const std::string& message, int exit_code);

/// Threads for this rank when runtime.threads is 0: the machine's cores divided among the ranks
/// on this node (at least 1). `cores`: the cores this process may use.
int launch_threads_per_rank(int cores, const LaunchInfo& info);

}  // namespace skew
