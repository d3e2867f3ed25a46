// train.recompute (model/activations.h; docs/design.md "Activation recompute"): block, attention and
// none run the same ops on the same values in the same order, so the losses, the routing and every
// gradient are bit-identical across modes (memcmp, no tolerance), with router noise on (the
// recompute draws the forward's noise from the same Philox counters) and with gradient
// accumulation; and the plan sizes each mode from the table's keep column, as computed by hand.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "kernels/common/philox.h"
#include "model/activations.h"
#include "model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

// Three blocks, MoE at 0 and 2 (two MoE blocks and a dense one between): every kind of per-block
// copy has more than one block, and a dense block sits between MoE blocks.
const char* MOE_YAML = R"(
model:
  vocab_size: 500
  padded_vocab_size: 512
  d_model: 64
  n_blocks: 3
  moe_blocks: [0, 2]
  n_heads: 4
  n_kv_heads: 2
  d_ff: 128
  max_seq_len: 64
  n_experts: 8
  d_expert: 64
  top_k: 2
  router_noise_std: 1.0
train:
  batch_size: 8
  seq_len: 32
  microbatch: 8
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
)";

std::string tiny_yaml_file() {
    std::ifstream in(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// One optimizer step's results: the losses of each microbatch, the routing counts of each MoE
// block per microbatch, and every gradient buffer's raw bytes.
struct StepResult {
    std::vector<double> lm, balance, z;
    std::vector<std::vector<int64_t>> counts;
    std::vector<std::vector<uint8_t>> grads;
};

// batch_size 8 in `n_micro` microbatches under train.recompute `mode`; a random router (Philox,
// std 0.5) so that the noise changes the routing.
StepResult run_step(const std::string& yaml, const std::string& mode, int64_t n_micro, bool noise) {
    const int64_t mb = 8 / n_micro;
    auto t = make_test_model(yaml, {"train.recompute=" + mode, "train.batch_size=8"}, mb);
    Model& m = t->model;
    REQUIRE(m.act.recompute == *parse_choice<Recompute>(mode));
    model_init(m, 42);
    for (const BlockParams& b : m.blocks) {
        if (!b.moe) continue;
        std::vector<float> v(size_t(b.router.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * philox_normal({7, PHILOX_STREAM_GALORE}, 0, 99, i);
        set_weight(m, b.router, v);
    }
    const int64_t T = t->cfg.train.seq_len;
    const std::vector<int32_t> stream = lcg_tokens(8 * T + 1, t->cfg.model.vocab_size, 3);
    model_zero_grads(m);
    StepResult r;
    for (int64_t i = 0; i < n_micro; ++i) {
        const int32_t* x = stream.data() + i * mb * T;
        LossParts lp = model_forward_backward(m, x, x + 1, i, 5, n_micro, noise);
        r.lm.push_back(lp.lm_loss);
        r.balance.push_back(lp.balance_loss);
        r.z.push_back(lp.z_loss);
        for (const MoeStats& s : lp.moe) r.counts.push_back(s.counts);
    }
    for (const ParamRef& p : m.params) {
        const int64_t bytes = p.numel() * (p.grad.type == ScalarType::BF16 ? 2 : 4);
        const auto* g = static_cast<const uint8_t*>(p.grad.data);
        r.grads.emplace_back(g, g + bytes);
    }
    return r;
}

std::vector<std::string> param_names(const std::string& yaml) {
    auto t = make_test_model(yaml, {"train.batch_size=8"}, 8);
    std::vector<std::string> out;
    for (const ParamRef& p : t->model.params) out.push_back(p.info->name);
    return out;
}

void check_bit_identical(const StepResult& a, const StepResult& b, const std::vector<std::string>& names) {
    CHECK(a.lm == b.lm);
    CHECK(a.balance == b.balance);
    CHECK(a.z == b.z);
    CHECK(a.counts == b.counts);
    REQUIRE(a.grads.size() == names.size());
    REQUIRE(b.grads.size() == names.size());
    for (size_t i = 0; i < names.size(); ++i) {
        INFO(names[i]);
        REQUIRE(a.grads[i].size() == b.grads[i].size());
        CHECK(std::memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size()) == 0);
    }
}

int64_t declared_bytes(const Config& cfg, const ActDims& D) {
    int64_t n = 0;
    for (const BufferSpec& b : model_activation_buffers(cfg, D)) n += b.bytes();
    return n;
}

}  // namespace

TEST_CASE("train.recompute block, attention and none give bit-identical losses, routing and gradients", "[model]") {
    for (const bool tiny : {true, false}) {
        const std::string yaml = tiny ? tiny_yaml_file() : std::string(MOE_YAML);
        const std::vector<std::string> names = param_names(yaml);
        for (const int64_t n_micro : {int64_t(1), int64_t(4)}) {
            INFO((tiny ? "configs/tiny.yaml" : "3 blocks, MoE at 0 and 2") << ", grad_accum " << n_micro);
            const StepResult block = run_step(yaml, "block", n_micro, true);
            const StepResult attention = run_step(yaml, "attention", n_micro, true);
            const StepResult none = run_step(yaml, "none", n_micro, true);
            {
                INFO("attention vs block");
                check_bit_identical(attention, block, names);
            }
            {
                INFO("none vs block");
                check_bit_identical(none, block, names);
            }
            // The noise is live here: without it the routing and the gradients change, so the equality
            // above means the block mode's recompute drew the forward's noise (none recomputes nothing).
            const StepResult quiet = run_step(yaml, "block", n_micro, false);
            CHECK(quiet.counts != block.counts);
            size_t differ = 0;
            for (size_t i = 0; i < names.size(); ++i) differ += quiet.grads[i] != block.grads[i];
            CHECK(differ > names.size() / 2);
        }
    }
}

// The attention-side options (docs/architectures.md): QK-norm's kept q_pre, k_pre and rstd slots,
// the biases and a head_dim of 32 over d_model 64 and 4 heads, in each mode.
TEST_CASE("train.recompute modes stay bit-identical with QK-norm (full, per head), q, k, v biases and head_dim 32",
          "[model]") {
    for (const char* qk : {"full", "per_head"}) {
        INFO("model.qk_norm " << qk);
        std::string yaml = MOE_YAML;
        yaml.replace(yaml.find("model:\n") + 7, 0,
                     std::string("  positions: rope\n  norm: rmsnorm\n  head_dim: 32\n  attention_bias: true\n  "
                                 "qk_norm: ") +
                         qk + "\n");
        const std::vector<std::string> names = param_names(yaml);
        const StepResult block = run_step(yaml, "block", 2, true);
        {
            INFO("attention vs block");
            check_bit_identical(run_step(yaml, "attention", 2, true), block, names);
        }
        {
            INFO("none vs block");
            check_bit_identical(run_step(yaml, "none", 2, true), block, names);
        }
    }
}

TEST_CASE("train.recompute with deferred expert gradients: the kept expert operands and the norm are the same",
          "[model]") {
    // Deferred mode copies each MoE block's expert operands out of the block's slots (its own under
    // attention and none, the shared recomputed set under block): the global norm, which reads them
    // through Gram matrices, must not depend on the mode.
    std::vector<double> norms;
    for (const char* mode : {"block", "attention", "none"}) {
        auto t = make_test_model(MOE_YAML, {std::string("train.recompute=") + mode, "train.expert_grads=deferred"}, 4);
        Model& m = t->model;
        REQUIRE(m.deferred.on);
        model_init(m, 42);
        const int64_t T = t->cfg.train.seq_len;
        const std::vector<int32_t> stream = lcg_tokens(8 * T + 1, t->cfg.model.vocab_size, 3);
        model_zero_grads(m);
        for (int64_t i = 0; i < 2; ++i) {
            const int32_t* x = stream.data() + i * 4 * T;
            model_forward_backward(m, x, x + 1, i, 5, 2);
        }
        norms.push_back(model_grad_norm(m));
    }
    INFO("norms " << norms[0] << " " << norms[1] << " " << norms[2]);
    CHECK(norms[0] > 0.0);
    CHECK(norms[1] == norms[0]);
    CHECK(norms[2] == norms[0]);
}

TEST_CASE("the plan sizes each train.recompute mode from the table's keep column, as computed by hand", "[model]") {
    // MOE_YAML at microbatch 1 x 32 tokens: N = 32, NK = 64, d 64, q 64, kv 32, d_ff 128, d_expert 64,
    // E 8, top-2, 4 heads; one dense block and two MoE blocks.
    const int64_t N = 32, NK = 64, d = 64, qd = 64, kvd = 32, ff = 128, de = 64, E = 8, k = 2, BHT = 1 * 4 * 32;
    // A block's working slots (bytes) kept per block under attention and none, by kind:
    // ln1 out/mean/rstd, q, k, v, resid1, ln2 out/mean/rstd
    const std::vector<int64_t> all = {N * d * 2,   N * 4,     N * 4,     N * qd * 2, N * kvd * 2,
                                      N * kvd * 2, N * d * 2, N * d * 2, N * 4,      N * 4};
    const std::vector<int64_t> dense = {N * ff * 2, N * ff * 2, N * ff * 2};  // ffn h1, h2, act
    // router logits, probs, top-k idx, gate; counts, offsets, the two permutations; moe in/h1/h2/act/out
    const std::vector<int64_t> moe = {N * E * 4, N * E * 4,  N * k * 4,   N * k * 4,   E * 8,       (E + 1) * 8, NK * 8,
                                      NK * 8,    NK * d * 2, NK * de * 2, NK * de * 2, NK * de * 2, NK * d * 2};
    // ... and the attention core, kept per block under none only: logsumexp (B, H, T) fp32, output (N, q) bf16
    const std::vector<int64_t> core = {BHT * 4, N * qd * 2};
    auto sum = [](const std::vector<int64_t>& v, bool aligned) {
        int64_t s = 0;
        for (int64_t b : v) s += aligned ? (b + 255) / 256 * 256 : b;
        return s;
    };
    // block mode holds one copy of each; attention adds a copy per further block of the kind (two
    // more for the three blocks' `all`, none for the one dense block, one for the two MoE blocks);
    // none adds two more copies of the attention core.
    for (const bool aligned : {false, true}) {
        const int64_t attention_extra = 2 * sum(all, aligned) + 0 * sum(dense, aligned) + 1 * sum(moe, aligned);
        const int64_t none_extra = attention_extra + 2 * sum(core, aligned);
        if (!aligned) {
            CHECK(attention_extra == 86664);
            CHECK(none_extra == 95880);
        }
        std::vector<int64_t> declared, laid_out;
        int64_t head_only = 0;  // the head's own buffers (HEAD..HEAD), 256-byte aligned
        for (const char* mode : {"block", "attention", "none"}) {
            auto t = make_test_model(MOE_YAML, {std::string("train.recompute=") + mode}, 1);
            const ActDims D = act_dims(t->cfg.model, 1, t->cfg.train.seq_len, 0);
            REQUIRE(D.N == N);
            declared.push_back(declared_bytes(t->cfg, D));
            laid_out.push_back(t->plan.activation_bytes);
            head_only = 0;
            for (const BufferSpec& b : t->plan.buffers)
                if (b.kind == BufferKind::ACTIVATION && b.first == Phase::HEAD && b.last == Phase::HEAD)
                    head_only += (b.bytes() + 255) / 256 * 256;
        }
        INFO("declared " << declared[0] << " " << declared[1] << " " << declared[2] << "; laid out " << laid_out[0]
                         << " " << laid_out[1] << " " << laid_out[2]);
        if (!aligned) {  // the table's buffers, before layout
            CHECK(declared[1] - declared[0] == attention_extra);
            CHECK(declared[2] - declared[0] == none_extra);
        } else {
            // The arena: the extra copies live over the whole forward and backward, 256-byte aligned.
            // A slot that the backward recomputes is dead during the head (BufferSpec::dead_in_head)
            // and may share the head's bytes: block mode's working slots, attention mode's attention
            // core; per-block copies may not. So each mode's layout lies within the head's own
            // buffers of the declared difference, and none (nothing shared) is the largest.
            CHECK(laid_out[1] - laid_out[0] >= attention_extra - head_only);
            CHECK(laid_out[1] - laid_out[0] <= attention_extra + head_only);
            CHECK(laid_out[2] - laid_out[0] >= none_extra - head_only);
            CHECK(laid_out[2] - laid_out[0] <= none_extra + head_only);
            CHECK(laid_out[2] >= laid_out[1]);
        }
    }
}

TEST_CASE("train.recompute binds a block's slots per block where kept and shared where recomputed", "[model]") {
    auto block = make_test_model(MOE_YAML, {"train.recompute=block"}, 1);
    auto attention = make_test_model(MOE_YAML, {"train.recompute=attention"}, 1);
    auto none = make_test_model(MOE_YAML, {"train.recompute=none"}, 1);
    const ActSlots& b = block->model.act;
    const ActSlots& a = attention->model.act;
    const ActSlots& n = none->model.act;
    REQUIRE(b.q.size() == 3);
    // block: one shared set (MoE slots null for the dense block 1, FFN slots null for MoE blocks)
    CHECK(static_cast<void*>(b.q[0]) == block->arena.ptr("act.q"));
    CHECK(b.q[0] == b.q[2]);
    CHECK(b.moe_in[0] == b.moe_in[2]);
    CHECK(b.moe_in[1] == nullptr);
    CHECK(b.ffn_h1[0] == nullptr);
    CHECK(static_cast<void*>(b.ffn_h1[1]) == block->arena.ptr("act.ffn_h1"));
    CHECK(block->plan.find("act.q.0") < 0);
    // attention: q, k, v and the rest per block; the attention core shared
    CHECK(static_cast<void*>(a.q[2]) == attention->arena.ptr("act.q.2"));
    CHECK(static_cast<void*>(a.moe_out[2]) == attention->arena.ptr("act.moe_out.2"));
    CHECK(attention->plan.find("act.moe_out.1") < 0);  // block 1 is dense
    CHECK(a.attn_out[0] == a.attn_out[2]);
    CHECK(static_cast<void*>(a.attn_out[0]) == attention->arena.ptr("act.attn_out"));
    // none: the attention core per block too
    CHECK(static_cast<void*>(n.attn_out[1]) == none->arena.ptr("act.attn_out.1"));
    CHECK(static_cast<void*>(n.attn_lse[2]) == none->arena.ptr("act.attn_lse.2"));
    CHECK(n.attn_out[0] != n.attn_out[1]);
    // every mode: the block inputs per block
    CHECK(static_cast<void*>(n.block_input[2]) == none->arena.ptr("act.block_input.2"));
    CHECK(static_cast<void*>(b.block_input[2]) == block->arena.ptr("act.block_input.2"));
}

TEST_CASE("a model bound to a plan of another train.recompute mode is refused, naming the slot", "[model]") {
    Config cfg = load_config_text(MOE_YAML, "test.yaml", {"train.recompute=block"});
    const ParamTable table = build_param_table(cfg.model);
    MemoryPlan plan = build_memory_plan(cfg, table, builtin_optimizer("skewadam"), 1);
    Arena arena = allocate_host_arena(plan);
    arena.plan = &plan;
    auto be = make_cpu_backend();
    cfg.train.recompute = Recompute::NONE;
    CHECK_THROWS_WITH(model_bind(cfg, table, arena, *be), Catch::Contains("act.ln1_out.0"));
    CHECK_THROWS_WITH(load_config_text(MOE_YAML, "test.yaml", {"train.recompute=selective"}),
                      Catch::Contains("train.recompute") && Catch::Contains("block"));
}
