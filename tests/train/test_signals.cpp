// SIGINT/SIGTERM: the first signal sets the flag the loop polls (the process keeps running to
// finish the step and checkpoint); a second signal exits at once with 128 + signo.
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "train/signals.h"

using namespace skew;

namespace {

// Run f in a child process with stderr silenced; return its wait status.
template <typename F>
int in_child(F f) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        FILE* null = std::freopen("/dev/null", "w", stderr);
        (void)null;
        ::_exit(f());
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return status;
}

}  // namespace

TEST_CASE("the first SIGINT sets the stop flag and the process keeps running") {
    int st = in_child([] {
        install_stop_handlers();
        if (stop_requested()) return 10;
        std::raise(SIGINT);
        if (!stop_requested()) return 11;
        if (stop_signal() != SIGINT) return 12;
        return 0;  // still alive: the loop would now finish its step and checkpoint
    });
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("SIGTERM requests a stop the same way") {
    int st = in_child([] {
        install_stop_handlers();
        std::raise(SIGTERM);
        return stop_requested() && stop_signal() == SIGTERM ? 0 : 1;
    });
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
}

TEST_CASE("a second signal exits at once with status 128 + signo") {
    int st = in_child([] {
        install_stop_handlers();
        std::raise(SIGINT);
        std::raise(SIGINT);
        return 0;  // not reached
    });
    REQUIRE(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 128 + SIGINT);
}

TEST_CASE("restoring the handlers brings back the default action") {
    int st = in_child([] {
        std::signal(SIGTERM, SIG_DFL);  // the test framework's own handler is not the point here
        install_stop_handlers();
        restore_stop_handlers();
        std::raise(SIGTERM);
        return 0;  // not reached: default SIGTERM kills
    });
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGTERM);
}

TEST_CASE("a stop can be requested and cleared from code") {
    clear_stop_request();
    CHECK(!stop_requested());
    request_stop();
    CHECK(stop_requested());
    CHECK(stop_signal() == 0);
    clear_stop_request();
    CHECK(!stop_requested());
}
