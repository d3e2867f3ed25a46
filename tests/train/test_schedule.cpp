// The trainer's cosine schedule (docs/optimizers.md §8): warmup = max(1, int(steps*frac)),
// lr*s/warmup up to the warmup, then cosine to lr*min_lr_frac; values checked to the bit against
// the Python expression of the paper's trainer (float.hex() of its cosine_lr; docs/sources.md).
#include <catch2/catch.hpp>

#include <cmath>

#include "engine/config.h"
#include "engine/error.h"
#include "train/schedule.h"

using namespace skew;

namespace {
// 0x1.0c6f7a0b5ed8dp-20 etc.: Python's float.hex() of the trainer's lr at those steps.
double hex(const char* s) { return std::strtod(s, nullptr); }
}  // namespace

TEST_CASE("the paper's protocol warms up over 300 of 10,000 steps") {
    CHECK(warmup_steps(10000, 0.03) == 300);
    CHECK(warmup_steps(20, 0.03) == 1);  // int(0.6) = 0, then max(1, .)
    CHECK(warmup_steps(100, 0.0) == 1);
    CHECK(warmup_steps(1000, 0.5) == 500);
    CHECK_THROWS_AS(warmup_steps(0, 0.03), Error);
    CHECK_THROWS_AS(warmup_steps(10, 1.5), Error);
}

TEST_CASE("step 1 uses lr/warmup, not zero, bit-identical to the trainer") {
    CHECK(cosine_lr(3e-4, 1, 10000, 300) == hex("0x1.0c6f7a0b5ed8dp-20"));
    CHECK(cosine_lr(3e-4, 2, 10000, 300) == hex("0x1.0c6f7a0b5ed8dp-19"));
    CHECK(cosine_lr(3e-4, 299, 10000, 300) == hex("0x1.3986338b47c73p-12"));
}

TEST_CASE("the warmup ends at the full rate and the decay starts just below it") {
    CHECK(cosine_lr(3e-4, 300, 10000, 300) == 3e-4);
    CHECK(cosine_lr(3e-4, 301, 10000, 300) == hex("0x1.3a92a27aeca57p-12"));
    CHECK(cosine_lr(3e-4, 301, 10000, 300) < 3e-4);
}

TEST_CASE("the midpoint of the decay is half the rate") {
    CHECK(cosine_lr(3e-4, 5150, 10000, 300) == hex("0x1.3a92a30553261p-13"));
    CHECK(cosine_lr(3e-4, 5150, 10000, 300) == 1.5e-4);
}

TEST_CASE("the last step uses exactly zero, or lr*min_lr_frac") {
    CHECK(cosine_lr(3e-4, 10000, 10000, 300) == 0.0);
    CHECK(cosine_lr(3e-4, 9999, 10000, 300) == hex("0x1.14cd013dd97f6p-37"));
    CHECK(cosine_lr(1.0, 10000, 10000, 300, 0.1) == Approx(0.1).epsilon(1e-15));
    CHECK(cosine_lr(1.0, 5150, 10000, 300, 0.1) == Approx(0.55).epsilon(1e-15));
}

TEST_CASE("the schedule follows the config's steps, warmup and floor") {
    TrainConfig t;
    t.steps = 20;
    t.warmup_frac = 0.03;
    CHECK(scheduled_lr(1e-3, 1, t) == hex("0x1.0624dd2f1a9fcp-10"));  // warmup 1: the full rate at step 1
    CHECK(scheduled_lr(1e-3, 2, t) == hex("0x1.045b39ac1c759p-10"));
    CHECK(scheduled_lr(1e-3, 11, t) == hex("0x1.e0fe1da9b8669p-12"));
    CHECK(scheduled_lr(1e-3, 20, t) == 0.0);
}

TEST_CASE("a step outside [1, steps] is refused with a message naming it") {
    CHECK_THROWS_WITH(cosine_lr(3e-4, 0, 100, 3), Catch::Contains("step 0 outside [1, 100]"));
    CHECK_THROWS_WITH(cosine_lr(3e-4, 101, 100, 3), Catch::Contains("step 101"));
}

TEST_CASE("a one-step run uses the full rate at its only step") {
    CHECK(cosine_lr(2e-4, 1, 1, warmup_steps(1, 0.03)) == 2e-4);
}
