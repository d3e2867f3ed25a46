// engine/process_env.h: colour and "\r" redraws only on a terminal. A pseudo-terminal stands for
// the user's terminal; under an MPI launcher even a TTY is not one (Open MPI gives each rank a
// pseudo-terminal whatever mpirun's own output is), and TERM=dumb and NO_COLOR are honoured.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "engine/process_env.h"

namespace {

// Set (or with nullptr unset) environment variables for one scope, restoring them after.
struct ScopedEnv {
    std::vector<std::pair<std::string, std::string>> saved;
    std::vector<std::string> unset_after;
    void set(const char* name, const char* value) {
        if (const char* old = std::getenv(name)) saved.emplace_back(name, old);
        else unset_after.push_back(name);
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~ScopedEnv() {
        for (const auto& n : unset_after) unsetenv(n.c_str());
        for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
    }
};

}  // namespace

TEST_CASE("colour and redraws go to a terminal only: not a pipe, not under mpirun, not TERM=dumb, not NO_COLOR",
          "[engine][process_env]") {
    const int master = posix_openpt(O_RDWR | O_NOCTTY);
    REQUIRE(master >= 0);
    REQUIRE(grantpt(master) == 0);
    REQUIRE(unlockpt(master) == 0);
    const int tty = open(ptsname(master), O_RDWR | O_NOCTTY);
    REQUIRE(tty >= 0);
    int pipe_fds[2];
    REQUIRE(pipe(pipe_fds) == 0);

    ScopedEnv env;
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK", "SLURM_PROCID",
                          "SLURM_STEP_NUM_TASKS", "NO_COLOR"})
        env.set(v, nullptr);
    env.set("TERM", "xterm-256color");
    CHECK(skew::output_is_terminal(tty));
    CHECK(skew::colour_output(tty));
    CHECK_FALSE(skew::output_is_terminal(pipe_fds[1]));  // a pipe (| less, mpirun's stderr)
    CHECK_FALSE(skew::colour_output(pipe_fds[1]));

    env.set("NO_COLOR", "1");
    CHECK(skew::output_is_terminal(tty));  // redraws still, colour not
    CHECK_FALSE(skew::colour_output(tty));
    env.set("NO_COLOR", nullptr);

    env.set("TERM", "dumb");
    CHECK_FALSE(skew::output_is_terminal(tty));
    env.set("TERM", nullptr);
    CHECK_FALSE(skew::output_is_terminal(tty));
    env.set("TERM", "xterm");

    // a rank of `mpirun ... > file`: its stdout is Open MPI's pseudo-terminal, the output a file
    env.set("OMPI_COMM_WORLD_SIZE", "2");
    CHECK_FALSE(skew::output_is_terminal(tty));
    CHECK_FALSE(skew::colour_output(tty));
    env.set("OMPI_COMM_WORLD_SIZE", nullptr);
    env.set("PMIX_RANK", "1");
    CHECK_FALSE(skew::colour_output(tty));

    close(tty);
    close(master);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
}
