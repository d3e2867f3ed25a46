// The memory plan of one expert-parallel rank (docs/distributed.md, "Expert parallel"): the expert
// banks' weights, gradients and optimizer state divide by M through the parameter table alone, and
// the all-to-all buffers are declared activations sized for the worst case (every rank of the
// group routing every token copy to this rank's experts).
#include <catch2/catch.hpp>

#include "engine/config.h"
#include "engine/param_table.h"
#include "model/activations.h"
#include "plan/plan.h"

using namespace skew;

namespace {

int64_t buffer_bytes(const MemoryPlan& p, const std::string& name) {
    const int i = p.find(name);
    return i < 0 ? -1 : p.buffers[size_t(i)].bytes();
}

}  // namespace

TEST_CASE("an expert-parallel rank's plan holds 1/M of the expert banks and declares the all-to-all rows") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    const OptimizerConfig opt = *c.find_optimizer("adamw");  // state proportional to the parameters
    const ParamTable whole = build_param_table(c.model);
    const MemoryPlan one = build_memory_plan(c, whole, opt, 8);
    const int64_t expert_bf16 = whole.tier_numel(Tier::EXPERTS) * 2;
    for (int64_t M : {2, 8}) {
        INFO("M " << M);
        const ParamTable shard = build_param_table(c.model, ExpertShard{M, M - 1});
        CHECK(table_expert_parallel(shard, c.model) == M);
        const MemoryPlan p = build_memory_plan(c, shard, opt, 8);
        // weights and bf16 gradients: the expert banks' bytes divide by M, nothing else changes
        CHECK(one.weights_bytes - p.weights_bytes == expert_bf16 - expert_bf16 / M);
        CHECK(one.grads_bytes - p.grads_bytes == expert_bf16 - expert_bf16 / M);
        // AdamW keeps two fp32 moments per element
        CHECK(one.state_bytes - p.state_bytes == 2 * 2 * (expert_bf16 - expert_bf16 / M));
        // the exchange: N = 8 x 128 tokens, 2 copies each, d_model 4096, bf16; M N k rows at most
        const int64_t NK = 8 * 128 * 2, rows = M * NK;
        CHECK(buffer_bytes(p, "act.ep_recv") == rows * 4096 * 2);
        CHECK(buffer_bytes(p, "act.ep_moe_in") == rows * 4096 * 2);
        CHECK(buffer_bytes(p, "act.ep_moe_out") == rows * 4096 * 2);
        CHECK(buffer_bytes(p, "act.moe_h1") == rows * 4096 * 2);
        CHECK(buffer_bytes(p, "act.d_moe_act") == rows * 4096 * 2);
        CHECK(buffer_bytes(p, "act.ep_perm") == rows * 8);
        CHECK(buffer_bytes(p, "act.ep_offsets") == (128 / M + 1) * 8);
        CHECK(buffer_bytes(p, "act.moe_in") == NK * 4096 * 2);  // the send side: this rank's own copies
    }
    // one process: no exchange slots, the expert rows sized for its own copies
    CHECK(buffer_bytes(one, "act.ep_recv") == -1);
    CHECK(buffer_bytes(one, "act.moe_h1") == 8 * 128 * 2 * 4096 * 2);
}
