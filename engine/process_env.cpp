// Launcher detection and terminal checks from the process's environment (process_env.h).
#include "engine/process_env.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace skew {
namespace {

bool env_set(const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
}

}  // namespace

bool launched_by_mpi() {
    if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_SIZE") || env_set("PMI_RANK"))
        return true;
    const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS");
    return env_set("SLURM_PROCID") && tasks && std::atoi(tasks) > 1;
}

bool output_is_terminal(int fd) {
    if (::isatty(fd) != 1 || launched_by_mpi()) return false;
    const char* term = std::getenv("TERM");
    return term && *term && std::strcmp(term, "dumb") != 0;
}

bool colour_output(int fd) { return output_is_terminal(fd) && !env_set("NO_COLOR"); }

}  // namespace skew
