// The learning-rate schedule of the training protocol: linear warmup from 0 then cosine decay,
// exactly as the paper's trainer computes it (docs/optimizers.md §8, `cosine_lr` of its train.py,
// docs/sources.md; docs/design.md "Training protocol"). Steps are 1-based: step 1 is the first update.
#pragma once
#include <cstdint>

namespace skew {

struct TrainConfig;

/// Warmup length in steps: max(1, int(steps * warmup_frac)), with Python's truncating int() on
/// the double product (10,000 steps at 0.03 give 300). Throws skew::Error when steps < 1 or
/// warmup_frac is outside [0, 1].
int64_t warmup_steps(int64_t steps, double warmup_frac);

/// Learning rate at 1-based `step` of `steps`: base_lr * step / warmup for step <= warmup, else
/// lr_min + 0.5 * (base_lr - lr_min) * (1 + cos(pi * (step - warmup) / (steps - warmup))) with
/// lr_min = base_lr * min_lr_frac. Step 1 uses base_lr / warmup (not 0); step `steps` uses lr_min.
/// With min_lr_frac = 0 the value is bit-identical to the trainer's Python expression.
/// Throws skew::Error, naming the step, when step is outside [1, steps].
double cosine_lr(double base_lr, int64_t step, int64_t steps, int64_t warmup, double min_lr_frac = 0.0);

/// The protocol's learning rate at `step` for an optimizer whose base rate is base_lr: cosine_lr
/// with train.steps, warmup_steps(train.steps, train.warmup_frac) and train.min_lr_frac.
double scheduled_lr(double base_lr, int64_t step, const TrainConfig& train);

}  // namespace skew
