// Graceful stop on SIGINT/SIGTERM (docs/design.md, "Errors, not crashes"): the first signal sets a flag
// the training loop polls between steps (finish the step, checkpoint, exit cleanly); a second
// signal exits at once with status 128 + signal number.
#pragma once

namespace skew {

/// Install the SIGINT and SIGTERM handlers and clear any earlier request. The handler is
/// async-signal-safe: it sets the flag and writes one fixed line to stderr (`first_signal_line`, a
/// string that outlives the handlers, e.g. a literal; nullptr: the training loop's "finishing this
/// step, then saving a checkpoint"); on the second signal it writes another line and calls
/// _exit(128 + signo). Throws skew::Error if sigaction fails.
void install_stop_handlers(const char* first_signal_line = nullptr);

/// Put back the handlers that were there before install_stop_handlers (no-op if not installed).
void restore_stop_handlers();

/// Whether a stop was requested (a signal arrived, or request_stop was called). Poll once per step.
bool stop_requested();

/// The signal that requested the stop (SIGINT or SIGTERM), 0 if none or requested by request_stop.
int stop_signal();

/// Request a stop from code (the fault policy's "stop", tests); same effect as one signal.
void request_stop();

/// Forget a pending request (a new optimizer's run after a clean stop is not started anyway; tests).
void clear_stop_request();

}  // namespace skew
