// dist/launch.h without a launcher: which environments count as a launch by mpirun or srun, the
// threads a rank gets when runtime.threads is 0, and the one-process world.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "dist/launch.h"

namespace {

// Unset every variable launched_by_mpi reads, remembering them, and restore them at the end.
struct CleanLaunchEnv {
    std::vector<std::pair<std::string, std::string>> saved;
    CleanLaunchEnv() {
        for (const char* v :
             {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}) {
            if (const char* x = std::getenv(v)) saved.emplace_back(v, x);
            unsetenv(v);
        }
    }
    ~CleanLaunchEnv() {
        for (const char* v :
             {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"})
            unsetenv(v);
        for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
    }
};

}  // namespace

TEST_CASE("launched_by_mpi: mpirun, PMIx, PMI and multi-task srun count, a plain run and a batch script do not") {
    CleanLaunchEnv env;
    CHECK_FALSE(skew::launched_by_mpi());
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    CHECK(skew::launched_by_mpi());
    unsetenv("OMPI_COMM_WORLD_SIZE");
    setenv("PMIX_RANK", "0", 1);
    CHECK(skew::launched_by_mpi());
    unsetenv("PMIX_RANK");
    setenv("PMI_RANK", "3", 1);
    CHECK(skew::launched_by_mpi());
    unsetenv("PMI_RANK");
    // a Slurm batch script's own task (SLURM_PROCID 0, one task) is not a launch
    setenv("SLURM_PROCID", "0", 1);
    CHECK_FALSE(skew::launched_by_mpi());
    setenv("SLURM_STEP_NUM_TASKS", "1", 1);
    CHECK_FALSE(skew::launched_by_mpi());
    setenv("SLURM_STEP_NUM_TASKS", "8", 1);
    CHECK(skew::launched_by_mpi());
}

TEST_CASE("without a launcher: rank 0 of 1, no MPI, the one-process world, and threads split over local ranks") {
    CleanLaunchEnv env;
    int argc = 1;
    char name[] = "test";
    char* args[] = {name, nullptr};
    char** argv = args;
    const skew::LaunchInfo& info = skew::launch_init(&argc, &argv);
    CHECK_FALSE(info.mpi);
    CHECK(info.rank == 0);
    CHECK(info.world_size == 1);
    CHECK(info.local_size == 1);
    skew::Communicator& w = skew::launch_world();
    CHECK(w.world_size() == 1);
    CHECK(w.describe() == "one process");
    CHECK(&w == &skew::launch_world());
    skew::LaunchInfo four;
    four.local_size = 4;
    CHECK(skew::launch_threads_per_rank(16, four) == 4);
    CHECK(skew::launch_threads_per_rank(6, four) == 1);
    CHECK(skew::launch_threads_per_rank(2, four) == 1);  // never 0
    CHECK(skew::launch_threads_per_rank(16, info) == 16);
    skew::launch_finalize();
    skew::launch_finalize();  // twice is fine
}
