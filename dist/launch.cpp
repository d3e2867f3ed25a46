// MPI launch detection, start-up, the world communicator and error shutdown (dist/launch.h).
#include "dist/launch.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dist/mpi_communicator.h"
#include "engine/error.h"

namespace skew {
namespace {

LaunchInfo g_info;
std::unique_ptr<Communicator> g_world;
bool g_mpi_started = false;

}  // namespace

const LaunchInfo& launch_init(int* argc, char*** argv) {
    if (g_mpi_started || !launched_by_mpi()) return g_info;
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        fail("MPI_Init_thread failed (launched by mpirun or srun, but MPI could not start)");
    g_mpi_started = true;
    g_info.mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_info.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_info.world_size);
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_info.rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &g_info.local_rank);
        MPI_Comm_size(node, &g_info.local_size);
        MPI_Comm_free(&node);
    }
    return g_info;
}

const LaunchInfo& launch_info() { return g_info; }

Communicator& launch_world() {
    if (!g_world) g_world = g_info.mpi ? make_mpi_world_communicator() : make_self_communicator();
    return *g_world;
}

void launch_finalize() {
    g_world.reset();
    if (!g_mpi_started) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
    g_mpi_started = false;
}

void launch_fail(const std::string& message, int exit_code) {
    std::fflush(stdout);
    if (!g_info.mpi) {
        std::fprintf(stderr, "skew: error: %s\n", message.c_str());
        return;
    }
    std::fprintf(stderr, "skew: error: rank %d: %s\n", g_info.rank, message.c_str());
    std::fflush(stderr);
    if (g_info.world_size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
    launch_finalize();  // world size 1: a normal shutdown, the caller exits with exit_code
}

int launch_threads_per_rank(int cores, const LaunchInfo& info) {
    const int per = cores / (info.local_size > 0 ? info.local_size : 1);
    return per > 0 ? per : 1;
}

}  // namespace skew
