// The MoE block under expert parallelism (docs/distributed.md, "Expert parallel"), every group of M
// ranks of the run (M = 2, 4 where the world holds them), each rank its own tokens, on the CPU
// backend over MPI:
// - the rank's logits and every gradient outside the expert banks equal one process running the
//   rank's tokens alone, bit for bit (routing, noise, balance and z-loss are the rank's own, as today);
// - the expert banks' gradients gathered over the group equal one process running the group's
//   tokens concatenated, bit for bit (the owner sees each expert's rows in that process's order);
// for natural routing, an expert that gets no token and all tokens routed to rank 0's experts.
#include <catch2/catch.hpp>
#include <mpi.h>

#include <cstring>
#include <memory>

#include "dist/mpi_communicator.h"
#include "engine/error.h"
#include "kernels/common/philox.h"
#include "tests/model/model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

const char* EP_YAML = R"(
model:
  vocab_size: 120
  padded_vocab_size: 128
  d_model: 32
  n_blocks: 2
  moe_blocks: [1]
  n_heads: 2
  n_kv_heads: 1
  d_ff: 64
  max_seq_len: 16
  n_experts: 8
  d_expert: 16
  top_k: 2
train:
  batch_size: 8
  seq_len: 8
  microbatch: 2
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
  grad_dtype: fp32
)";

constexpr int64_t B = 2, T = 8, N = B * T;

/// A CPU model over `shard`'s table with `microbatch` sequences.
std::unique_ptr<TestModel> make_model(const ExpertShard& shard, int64_t microbatch,
                                      const std::vector<std::string>& overrides = {}) {
    const Config cfg = load_config_text(EP_YAML, "ep.yaml", overrides);
    const ParamTable table = build_param_table(cfg.model, shard);
    const OptimizerConfig opt = builtin_optimizer("skewadam");
    SessionSpec spec;
    spec.optimizer = &opt;
    spec.microbatch = microbatch;
    spec.table = &table;
    return open_test_model(cfg, spec);
}

const ParamRef& param(const Model& m, const std::string& name) {
    for (const ParamRef& p : m.params)
        if (p.info->name == name) return p;
    fail("no parameter {}", name);
}

enum class Routing { NATURAL, STARVED, SKEWED };

/// Initialize (seed 42) and shape the routing of MoE block 1: ln2.bias all ones makes every
/// token's router input sum to d_model (LayerNorm output sums to zero), so a router row of ones
/// adds d_model to that expert's logit and a row of minus ones takes it away.
void init_weights(Model& m, Routing r) {
    model_init(m, 42);
    const int64_t d = 32, E = 8;
    std::vector<float> router(size_t(E * d));
    for (size_t i = 0; i < router.size(); ++i) router[i] = 0.3f * philox_normal(PhiloxKey{5, 9}, 0, 1, i);
    if (r != Routing::NATURAL) {
        set_weight(m, param(m, "blocks.1.ln2.bias"), std::vector<float>(size_t(d), 1.0f));
        for (int64_t c = 0; c < d; ++c) {
            if (r == Routing::STARVED) router[size_t(3 * d + c)] = -1.0f;  // expert 3 never chosen
            if (r == Routing::SKEWED) router[size_t(0 * d + c)] += 1.0f, router[size_t(1 * d + c)] += 1.0f;
        }
    }
    set_weight(m, param(m, "blocks.1.moe.router.weight"), router);
}

std::vector<float> all_probe_logits(Model& m, int64_t rows, const std::vector<int32_t>& tok,
                                    const std::vector<int32_t>& tgt, int64_t accum, bool training, LossParts* lp) {
    m.probe_rows.clear();
    for (int64_t i = 0; i < rows; ++i) m.probe_rows.push_back(i);
    model_zero_grads(m);
    LossParts l = model_forward_backward(m, tok.data(), tgt.data(), 0, 1, accum, training);
    if (lp) *lp = l;
    return l.probe_logits;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The expert-parallel groups of the world: consecutive blocks of M ranks (color world_rank / M).
std::unique_ptr<Communicator> group_of(Communicator& world, int64_t M) {
    return world.split(world.rank() / int(M), world.rank());
}

}  // namespace

TEST_CASE("expert parallel: a rank's logits and non-expert gradients equal one process on its own tokens") {
    auto world = make_mpi_world_communicator();
    for (int64_t M : {2, 4}) {
        if (world->world_size() % M != 0) continue;
        auto group = group_of(*world, M);
        const int r = group->rank();
        for (Routing routing : {Routing::NATURAL, Routing::STARVED, Routing::SKEWED}) {
            INFO("M " << M << " routing " << int(routing) << " rank " << r);
            auto ep = make_model(ExpertShard{M, r}, B);
            model_set_expert_comm(ep->model, group.get());
            auto one = make_model(ExpertShard{}, B);
            init_weights(ep->model, routing);
            init_weights(one->model, routing);
            const auto tok = lcg_tokens(N, 120, 100 + uint64_t(world->rank()));
            const auto tgt = lcg_tokens(N, 120, 200 + uint64_t(world->rank()));
            LossParts lp_ep, lp_one;
            const auto logits_ep = all_probe_logits(ep->model, N, tok, tgt, 1, true, &lp_ep);
            const auto logits_one = all_probe_logits(one->model, N, tok, tgt, 1, true, &lp_one);
            CHECK(bits_equal(logits_ep, logits_one));
            CHECK(lp_ep.lm_loss == lp_one.lm_loss);
            CHECK(lp_ep.balance_loss == lp_one.balance_loss);
            CHECK(lp_ep.z_loss == lp_one.z_loss);
            REQUIRE(lp_ep.moe.size() == 1);
            CHECK(lp_ep.moe[0].counts == lp_one.moe[0].counts);
            if (routing == Routing::STARVED) CHECK(lp_ep.moe[0].counts[3] == 0);
            if (routing == Routing::SKEWED) CHECK(lp_ep.moe[0].counts[0] + lp_ep.moe[0].counts[1] == 2 * N);
            for (size_t i = 0; i < ep->model.params.size(); ++i) {
                const ParamRef &a = ep->model.params[i], &b = one->model.params[i];
                if (is_expert_bank(*a.info)) continue;
                INFO(a.info->name);
                CHECK(bits_equal(grad_host(a), grad_host(b)));
            }
        }
    }
}

TEST_CASE("expert parallel: the expert gradients gathered over the group equal one process on the group's tokens") {
    auto world = make_mpi_world_communicator();
    for (int64_t M : {2, 4}) {
        if (world->world_size() % M != 0) continue;
        auto group = group_of(*world, M);
        const int r = group->rank();
        for (Routing routing : {Routing::NATURAL, Routing::STARVED, Routing::SKEWED}) {
            INFO("M " << M << " routing " << int(routing) << " rank " << r);
            // the balance loss is a product of two means over a rank's tokens, not a sum over tokens:
            // off here, so that the ranks' gradients add up to the one process's
            const std::vector<std::string> no_balance = {"model.balance_loss_coef=0"};
            auto ep = make_model(ExpertShard{M, r}, B, no_balance);
            model_set_expert_comm(ep->model, group.get());
            auto one = make_model(ExpertShard{}, M * B, no_balance);
            init_weights(ep->model, routing);
            init_weights(one->model, routing);
            // the group's tokens: rank i's are rows [i N, (i + 1) N) of the one process's microbatch
            const int g0 = world->rank() - r;
            std::vector<int32_t> tok_all, tgt_all;
            for (int i = 0; i < M; ++i) {
                const auto t = lcg_tokens(N, 120, 100 + uint64_t(g0 + i)),
                           y = lcg_tokens(N, 120, 200 + uint64_t(g0 + i));
                tok_all.insert(tok_all.end(), t.begin(), t.end());
                tgt_all.insert(tgt_all.end(), y.begin(), y.end());
            }
            const std::vector<int32_t> tok(tok_all.begin() + r * N, tok_all.begin() + (r + 1) * N);
            const std::vector<int32_t> tgt(tgt_all.begin() + r * N, tgt_all.begin() + (r + 1) * N);
            // loss weight 1/M per rank: each token weighs 1/(M N) as in the one process's mean over M N
            const auto logits_ep = all_probe_logits(ep->model, N, tok, tgt, M, false, nullptr);
            const auto logits_one = all_probe_logits(one->model, M * N, tok_all, tgt_all, 1, false, nullptr);
            const int64_t Vp = 128;
            CHECK(bits_equal(
                logits_ep, std::vector<float>(logits_one.begin() + r * N * Vp, logits_one.begin() + (r + 1) * N * Vp)));
            for (size_t i = 0; i < ep->model.params.size(); ++i) {
                const ParamRef &a = ep->model.params[i], &b = one->model.params[i];
                INFO(a.info->name);
                const std::vector<float> ga = grad_host(a), gb = grad_host(b);
                if (is_expert_bank(*a.info)) {
                    CHECK(a.info->shape[0] == 8 / M);
                    std::vector<float> gathered(gb.size());
                    group->allgather(ga.data(), gathered.data(), int64_t(ga.size()), CommDType::F32);
                    CHECK(bits_equal(gathered, gb));
                    CHECK(max_abs(gb) > 0.0);
                } else {  // each rank holds its tokens' share; the sum is the one process's (fp32 order)
                    std::vector<float> sum = ga;
                    group->allreduce_sum(sum.data(), int64_t(sum.size()), CommDType::F32);
                    CHECK(rel_err(sum, gb) <= 2e-6);
                }
            }
        }
    }
}

TEST_CASE("expert parallel: a group that does not match the table is refused with a message") {
    auto world = make_mpi_world_communicator();
    auto ep = make_model(ExpertShard{2, 0}, B);
    CHECK_THROWS_WITH(model_set_expert_comm(ep->model, nullptr), Catch::Contains("no expert-parallel group"));
    auto self = make_self_communicator();
    CHECK_THROWS_WITH(model_set_expert_comm(ep->model, self.get()), Catch::Contains("parallel.expert is 2"));
    auto one = make_model(ExpertShard{}, B);
    if (world->world_size() > 1)
        CHECK_THROWS_WITH(model_set_expert_comm(one->model, world.get()), Catch::Contains("holds every expert"));
}
