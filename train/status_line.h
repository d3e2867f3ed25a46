// Progress display for `skew train`: a live one-line status (step, loss, val ppl, tokens/s, ETA)
// redrawn in place when stderr is a terminal; plain spdlog lines every train.log_every steps when
// it is not (a log file, CI).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace skew {

/// What one status update shows. NaN fields are shown as "-".
struct Progress {
    std::string optimizer;
    int64_t step = 0;           // steps completed
    int64_t total_steps = 0;    // train.steps
    double loss = 0;            // training loss of the last step (LM + aux)
    double val_ppl = 0;         // last validation perplexity; NaN before the first evaluation
    double tokens_per_sec = 0;  // recent training throughput
    double lr = 0;              // learning rate of the last step
};

/// The display state of one run (one optimizer).
struct StatusLine {
    bool live = false;       // redraw in place (stderr is a terminal)
    int64_t log_every = 1;   // plain mode: one log line every this many steps
    int64_t start_step = 0;  // step this session started at (resume), for the ETA
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point last_draw;
    bool drawn = false;  // a live line is on screen
};

/// A status line for a run starting at start_step; live when stderr is a terminal
/// (output_is_terminal: a TTY, not under an MPI launcher, TERM not dumb) unless force_plain. log_every < 1 is treated as 1.
StatusLine make_status_line(int64_t start_step, int64_t log_every, bool force_plain = false);

/// Seconds left at `step` of `total` when `elapsed` seconds took steps start_step..step: the mean
/// time per step times the steps left; NaN when no step has completed this session.
double eta_seconds(int64_t start_step, int64_t step, int64_t total, double elapsed);

/// "45s", "12m05s", "3h07m", "2d04h"; "-" for NaN or negative.
std::string format_duration(double seconds);

/// "12,345": an integer with thousands separators.
std::string with_thousands(int64_t n);

/// The status text: "skewadam step 120/10,000 | loss 5.4321 | val ppl 312.4 | lr 3.00e-04 |
/// 12,345 tok/s | ETA 1h02m".
std::string format_status(const Progress& p, double eta);

/// Show progress: live mode redraws the line in place (at most 10 times a second, and always at
/// the last step); plain mode logs it with spdlog::info every log_every steps and at the last step.
void status_update(StatusLine& s, const Progress& p);

/// Print a message as its own line (spdlog::info), clearing a live line first; the next update
/// draws the status again.
void status_message(StatusLine& s, const std::string& message);

/// status_message at warning level (spdlog::warn): something went wrong but the run goes on, such
/// as a step skipped for a NaN/inf loss or gradient.
void status_warning(StatusLine& s, const std::string& message);

/// End the live line with a newline (call when the run ends or before a long silent phase).
void status_finish(StatusLine& s);

}  // namespace skew
