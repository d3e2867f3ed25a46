// The status line: its text (step, loss, val ppl, lr, tokens/s, ETA), the ETA arithmetic, and the
// plain-log fallback when stderr is not a terminal.
#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>

#include "train/status_line.h"

using namespace skew;

TEST_CASE("the status line shows step, loss, val ppl, lr, tokens/s and ETA") {
    Progress p;
    p.optimizer = "skewadam";
    p.step = 120;
    p.total_steps = 10000;
    p.loss = 5.43214;
    p.val_ppl = 312.44;
    p.lr = 3e-4;
    p.tokens_per_sec = 12345.4;
    CHECK(format_status(p, 3725) ==
          "skewadam step 120/10,000 | loss 5.4321 | val ppl 312.4 | lr 3.00e-04 | 12,345 tok/s | ETA 1h02m");
    p.val_ppl = std::nan("");
    CHECK(format_status(p, std::nan("")) ==
          "skewadam step 120/10,000 | loss 5.4321 | val ppl - | lr 3.00e-04 | 12,345 tok/s | ETA -");
}

TEST_CASE("the ETA is the mean step time of this session times the steps left") {
    CHECK(eta_seconds(0, 10, 100, 20.0) == Approx(180.0));
    CHECK(eta_seconds(50, 60, 100, 5.0) == Approx(20.0));  // resumed at 50: only this session's steps count
    CHECK(std::isnan(eta_seconds(50, 50, 100, 5.0)));
    CHECK(eta_seconds(0, 100, 100, 10.0) == 0.0);
}

TEST_CASE("durations read as seconds, minutes, hours or days") {
    CHECK(format_duration(45) == "45s");
    CHECK(format_duration(725) == "12m05s");
    CHECK(format_duration(3 * 3600 + 7 * 60 + 20) == "3h07m");
    CHECK(format_duration(2 * 86400 + 4 * 3600) == "2d04h");
    CHECK(format_duration(-1) == "-");
    CHECK(format_duration(std::nan("")) == "-");
}

TEST_CASE("thousands separators") {
    CHECK(with_thousands(0) == "0");
    CHECK(with_thousands(999) == "999");
    CHECK(with_thousands(1000) == "1,000");
    CHECK(with_thousands(6784327680) == "6,784,327,680");
    CHECK(with_thousands(-12345) == "-12,345");
    CHECK(with_thousands(INT64_MIN) == "-9,223,372,036,854,775,808");
}

TEST_CASE("a status line is plain when asked or when stderr is not a terminal") {
    StatusLine s = make_status_line(5, 0, true);
    CHECK(!s.live);
    CHECK(s.log_every == 1);
    CHECK(s.start_step == 5);
    Progress p;
    p.optimizer = "adamw";
    p.step = 6;
    p.total_steps = 10;
    status_update(s, p);  // logs a line; does not draw
    CHECK(!s.drawn);
    status_finish(s);
}

TEST_CASE("a status warning is logged at warning level and a status message at info level") {
    std::ostringstream out;
    auto previous = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out));
    logger->set_pattern("[%l] %v");
    spdlog::set_default_logger(logger);
    StatusLine s = make_status_line(0, 1, /*force_plain=*/true);
    status_warning(s, "skewadam: step 2: non-finite loss (nan); step skipped (1 of 10 allowed)");
    status_message(s, "skewadam step 2: val loss 5.0000");
    spdlog::set_default_logger(previous);
    CHECK(out.str() ==
          "[warning] skewadam: step 2: non-finite loss (nan); step skipped (1 of 10 allowed)\n"
          "[info] skewadam step 2: val loss 5.0000\n");
}
