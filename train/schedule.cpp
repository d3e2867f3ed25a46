// The trainer's learning-rate schedule: linear warmup from 0, cosine decay to lr * min_lr_frac
// (docs/optimizers.md §8). Written in the same operation order as the Python reference so that
// the rates match it to the bit.
#include "train/schedule.h"

#include <cmath>
#include <numbers>

#include "engine/config.h"
#include "engine/error.h"

namespace skew {

int64_t warmup_steps(int64_t steps, double warmup_frac) {
    if (steps < 1) fail("train.steps must be at least 1 for the learning-rate schedule (got {})", steps);
    if (!(warmup_frac >= 0.0 && warmup_frac <= 1.0)) fail("train.warmup_frac must lie in [0, 1] (got {})", warmup_frac);
    int64_t w = static_cast<int64_t>(static_cast<double>(steps) * warmup_frac);  // Python int(): truncation
    return w < 1 ? 1 : w;
}

double cosine_lr(double base_lr, int64_t step, int64_t steps, int64_t warmup, double min_lr_frac) {
    if (step < 1 || step > steps)
        fail("learning-rate schedule asked for step {} outside [1, {}] (train.steps)", step, steps);
    if (warmup < 1) fail("learning-rate schedule: warmup must be at least 1 step (got {})", warmup);
    if (step <= warmup) return base_lr * static_cast<double>(step) / static_cast<double>(warmup);
    const double lr_min = base_lr * min_lr_frac;
    const double progress = std::numbers::pi * static_cast<double>(step - warmup) / static_cast<double>(steps - warmup);
    return lr_min + 0.5 * (base_lr - lr_min) * (1.0 + std::cos(progress));
}

double scheduled_lr(double base_lr, int64_t step, const TrainConfig& train) {
    return cosine_lr(base_lr, step, train.steps, warmup_steps(train.steps, train.warmup_frac), train.min_lr_frac);
}

}  // namespace skew
