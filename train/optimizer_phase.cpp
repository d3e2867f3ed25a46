// The optimizer phase's stages (train/optimizer_phase.h).
#include "train/optimizer_phase.h"

#include <memory>

#include "train/deferred_experts.h"
#include "train/idle_experts.h"

namespace skew {

std::vector<OptimizerStage> optimizer_stages(const Config& cfg, const OptimizerPhaseParts& p) {
    std::vector<OptimizerStage> stages;
    const bool skip_idle = cfg.train.idle_experts == IdleExperts::SKIP;
    if (p.zero) {  // ZeRO-1: this rank's owned ranges (idle experts kept inside), then the all-gather
        stages.push_back({"zero step", [p, skip_idle](const OptimizerStepInput& in) {
                              zero_optimizer_step(
                                  *p.zero, *p.optimizer, in.step, *p.backend, *p.opt,
                                  skip_idle ? idle_experts(*in.expert_tokens) : std::vector<IdleExpert>{},
                                  *p.zero_comm);
                          }});
        return stages;
    }
    // experts that got no token keep weights and state (train.idle_experts: skip)
    auto idle = std::make_shared<IdleExpertSnapshot>();
    if (skip_idle)
        stages.push_back({"idle experts: keep", [p, idle](const OptimizerStepInput& in) {
                              *idle = save_idle_experts(*p.backend, *p.opt, *p.slots,
                                                        held_idle_experts(idle_experts(*in.expert_tokens), *p.model));
                          }});
    stages.push_back({"step", [p](const OptimizerStepInput& in) { p.optimizer->step(*p.slots, in.step); }});
    if (cfg.train.expert_grads == ExpertGrads::DEFERRED)
        stages.push_back({"deferred experts", [p](const OptimizerStepInput& in) {
                              step_deferred_experts(*p.model, *p.opt, *p.optimizer, *p.slots, in.step);
                          }});
    if (skip_idle)
        stages.push_back({"idle experts: restore", [p, idle](const OptimizerStepInput&) {
                              restore_idle_experts(*p.backend, *idle);
                              *idle = IdleExpertSnapshot{};
                          }});
    if (p.dp->world_size > 1)
        stages.push_back({"data-parallel weights",
                          [p](const OptimizerStepInput&) { dp_after_optimizer_step(*p.dp, *p.model, *p.backend); }});
    return stages;
}

void run_optimizer_stages(std::span<const OptimizerStage> stages, const OptimizerStepInput& in) {
    for (const OptimizerStage& s : stages) s.run(in);
}

}  // namespace skew
