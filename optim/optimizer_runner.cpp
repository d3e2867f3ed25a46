// The CPU optimizer runner and the checks of an optimizer against a backend's support
// (optim/optimizer_runner.h).
#include "optim/optimizer_runner.h"

#include <spdlog/spdlog.h>

namespace skew {
namespace {

struct CpuRunner final : OptimizerRunner {
    OptimizerConfig opt;
    explicit CpuRunner(const OptimizerConfig& o) : opt(o) {}
    void step(std::span<ParamSlot> params, const OptimStep& s) override { optimizer_step(opt, params, s); }
};

}  // namespace

void require_optimizer_backend(const OptimizerConfig& opt, const OptimizerSupport& support) {
    if (support.galore_projector_on_host && opt.type == OptimizerType::GALORE)
        spdlog::warn(
            "{}: GaLore's reference form computes an exact SVD of every projected gradient on the host at "
            "step 1 and every {} steps (seconds per 4096 x 4096 matrix); those steps are slow",
            opt.name, opt.update_proj_gap);
}

std::unique_ptr<OptimizerRunner> make_cpu_optimizer_runner(const OptimizerConfig& opt) {
    return std::make_unique<CpuRunner>(opt);
}

}  // namespace skew
