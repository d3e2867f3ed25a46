// SIGINT/SIGTERM handling for the training loop: a lock-free flag set by an async-signal-safe
// handler; the second signal ends the process immediately (_exit, no destructors, no checkpoint).
#include "train/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "engine/error.h"

namespace skew {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");
std::atomic<int> g_signal_count{0};
std::atomic<int> g_signal{0};
std::atomic<bool> g_requested{false};
bool g_installed = false;
constexpr const char* kTrainStopLine =
    "\nskew: stop requested: finishing this step, then saving a checkpoint (signal again to exit at once)\n";
std::atomic<const char*> g_first_line{kTrainStopLine};
struct sigaction g_old_int {
}, g_old_term{};

void write_stderr(const char* s) {
    ssize_t r = ::write(STDERR_FILENO, s, std::strlen(s));
    (void)r;
}

extern "C" void on_stop_signal(int signo) {
    if (g_signal_count.fetch_add(1) == 0) {
        g_signal.store(signo);
        g_requested.store(true);
        write_stderr(g_first_line.load());
        return;
    }
    write_stderr("\nskew: second stop signal: exiting now without a checkpoint\n");
    ::_exit(128 + signo);
}

}  // namespace

void install_stop_handlers(const char* first_signal_line) {
    clear_stop_request();
    g_first_line.store(first_signal_line ? first_signal_line : kTrainStopLine);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // reads and writes in the step are not interrupted
    struct sigaction old_int {
    }, old_term{};
    if (::sigaction(SIGINT, &sa, &old_int) != 0 || ::sigaction(SIGTERM, &sa, &old_term) != 0)
        fail("cannot install the SIGINT/SIGTERM handlers: {}", std::strerror(errno));
    if (!g_installed) {
        g_old_int = old_int;
        g_old_term = old_term;
    }
    g_installed = true;
}

void restore_stop_handlers() {
    if (!g_installed) return;
    ::sigaction(SIGINT, &g_old_int, nullptr);
    ::sigaction(SIGTERM, &g_old_term, nullptr);
    g_installed = false;
}

bool stop_requested() { return g_requested.load(); }

int stop_signal() { return g_signal.load(); }

void request_stop() { g_requested.store(true); }

void clear_stop_request() {
    g_requested.store(false);
    g_signal.store(0);
    g_signal_count.store(0);
}

}  // namespace skew
