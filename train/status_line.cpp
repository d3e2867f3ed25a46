// The live status line and its plain-log fallback. Live mode writes "\r<text>\x1b[K" to stderr;
// log lines (spdlog, stdout by default) first clear it so the two never interleave on one line.
#include "train/status_line.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "engine/process_env.h"

namespace skew {

StatusLine make_status_line(int64_t start_step, int64_t log_every, bool force_plain) {
    StatusLine s;
    s.live = !force_plain && output_is_terminal(STDERR_FILENO);
    s.log_every = log_every < 1 ? 1 : log_every;
    s.start_step = start_step;
    s.start = std::chrono::steady_clock::now();
    s.last_draw = s.start - std::chrono::seconds(1);
    return s;
}

double eta_seconds(int64_t start_step, int64_t step, int64_t total, double elapsed) {
    const int64_t done = step - start_step;
    if (done <= 0 || !(elapsed >= 0)) return std::nan("");
    const int64_t left = total > step ? total - step : 0;
    return elapsed / double(done) * double(left);
}

std::string format_duration(double seconds) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) return "-";
    const int64_t t = int64_t(std::llround(seconds));
    if (t < 60) return fmt::format("{}s", t);
    if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
    if (t < 86400) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
    return fmt::format("{}d{:02}h", t / 86400, (t % 86400) / 3600);
}

std::string with_thousands(int64_t n) {
    // The magnitude as unsigned: -n overflows for INT64_MIN.
    std::string s = std::to_string(n < 0 ? 0 - uint64_t(n) : uint64_t(n)), out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i && (s.size() - i) % 3 == 0) out += ',';
        out += s[i];
    }
    return n < 0 ? "-" + out : out;
}

std::string format_status(const Progress& p, double eta) {
    // Not measured: "-"; overflowed: "inf"; huge (a diverged run's perplexity): exponent form.
    auto num = [](double v, const char* f) {
        if (std::isnan(v)) return std::string("-");
        if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf");
        return std::fabs(v) >= 1e6 ? fmt::format("{:.3e}", v) : fmt::format(fmt::runtime(f), v);
    };
    return fmt::format(
        "{} step {}/{} | loss {} | val ppl {} | lr {} | {} tok/s | ETA {}", p.optimizer, with_thousands(p.step),
        with_thousands(p.total_steps), num(p.loss, "{:.4f}"), num(p.val_ppl, "{:.1f}"), num(p.lr, "{:.2e}"),
        std::isfinite(p.tokens_per_sec) ? with_thousands(std::llround(p.tokens_per_sec)) : "-", format_duration(eta));
}

void status_update(StatusLine& s, const Progress& p) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - s.start).count();
    const std::string text = format_status(p, eta_seconds(s.start_step, p.step, p.total_steps, elapsed));
    const bool last = p.step >= p.total_steps;
    if (s.live) {
        if (!last && now - s.last_draw < std::chrono::milliseconds(100)) return;
        std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
        std::fflush(stderr);
        s.last_draw = now;
        s.drawn = true;
        return;
    }
    if (last || p.step % s.log_every == 0) spdlog::info("{}", text);
}

// Clear a live line so a message prints on its own line; the next update redraws the status.
static void clear_live_line(StatusLine& s) {
    if (s.live && s.drawn) {
        std::fprintf(stderr, "\r\x1b[K");
        std::fflush(stderr);
        s.drawn = false;
        s.last_draw = std::chrono::steady_clock::now() - std::chrono::seconds(1);  // redraw on next update
    }
}

void status_message(StatusLine& s, const std::string& message) {
    clear_live_line(s);
    spdlog::info("{}", message);
}

void status_warning(StatusLine& s, const std::string& message) {
    clear_live_line(s);
    spdlog::warn("{}", message);
}

void status_finish(StatusLine& s) {
    if (s.live && s.drawn) {
        std::fprintf(stderr, "\n");
        std::fflush(stderr);
    }
    s.drawn = false;
}

}  // namespace skew
