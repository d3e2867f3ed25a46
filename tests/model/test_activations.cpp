// The activation table (model/activations.h) read two ways: the plan's activation buffers and the
// model's bound slots come from the same lines, so they agree name for name and byte for byte, and
// the named scalar slots hold what the ops wrote.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "kernels/common/philox.h"
#include "model/activations.h"
#include "model_test_util.h"

using namespace skew;

namespace {

std::string tiny_yaml() {
    return "model: {d_model: 64, n_blocks: 2, moe_blocks: [1], n_heads: 4, n_kv_heads: 2, d_ff: 128, max_seq_len: 64,"
           " n_experts: 8, d_expert: 64, top_k: 2, vocab_size: 100, padded_vocab_size: 128}\n"
           "train: {batch_size: 4, seq_len: 16, microbatch: 2}\nruntime: {backend: cpu, workspace_gib: 0}\n";
}

std::set<std::string> act_names(const std::vector<BufferSpec>& bufs) {
    std::set<std::string> out;
    for (const BufferSpec& b : bufs)
        if (b.kind == BufferKind::ACTIVATION || b.name == "ws.scalars") out.insert(b.name);
    return out;
}

}  // namespace

TEST_CASE("the plan's activation buffers are the activation table's, and each slot binds to its own buffer",
          "[model]") {
    for (const char* moe : {"[1]", "[]"}) {
        INFO("moe_blocks " << moe);
        auto t = test::make_test_model(tiny_yaml(), {std::string("model.moe_blocks=") + moe}, 2);
        const ActDims D = act_dims(t->cfg.model, 2, t->cfg.train.seq_len, 0);
        CHECK(D.N == 32);
        CHECK(D.NK == 64);
        const auto table = model_activation_buffers(t->cfg, D);
        CHECK(act_names(table) == act_names(t->plan.buffers));
        // Byte for byte: each table buffer (act.logits aside, which the backend may enlarge) has the
        // plan's shape and dtype.
        for (const BufferSpec& b : table) {
            const int i = t->plan.find(b.name);
            REQUIRE(i >= 0);
            if (b.name == "act.logits") {
                CHECK(t->plan.buffers[size_t(i)].bytes() >= b.bytes());
                continue;
            }
            CHECK(t->plan.buffers[size_t(i)].shape == b.shape);
            CHECK(t->plan.buffers[size_t(i)].dtype == b.dtype);
            CHECK(t->plan.buffers[size_t(i)].first == b.first);
            CHECK(t->plan.buffers[size_t(i)].last == b.last);
        }
        const ActSlots& a = t->model.act;
        CHECK(static_cast<void*>(a.tokens) == t->arena.ptr("act.tokens"));
        CHECK(static_cast<void*>(a.d_attn_out) == t->arena.ptr("act.d_attn_out"));
        REQUIRE(a.block_input.size() == 2);
        CHECK(static_cast<void*>(a.block_input[1]) == t->arena.ptr("act.block_input.1"));
        CHECK(static_cast<void*>(a.scalars) == t->arena.ptr("ws.scalars"));
        const bool has_moe = std::string(moe) == "[1]";
        CHECK((a.router_logits[1] != nullptr) == has_moe);  // block 1: MoE or dense
        CHECK((t->plan.find("act.router_logits") >= 0) == has_moe);
        CHECK(a.ffn_h1[0] != nullptr);  // block 0 is dense in both
        // act.router_counts is int64 (E) declared as (E, 2) int32 words: 8 bytes per expert.
        if (has_moe) CHECK(t->plan.buffers[size_t(t->plan.find("act.router_counts"))].bytes() == 8 * 8);
    }
}

TEST_CASE("the named loss slots hold the losses the model returns", "[model]") {
    auto t = test::make_test_model(tiny_yaml(), {}, 2);
    model_init(t->model, 7);
    std::vector<int32_t> x(32), y(32);
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = int32_t((i * 37 + 11) % 100);
        y[i] = int32_t((i * 53 + 5) % 100);
    }
    LossParts lp = model_eval(t->model, x.data(), y.data());
    REQUIRE(std::isfinite(lp.lm_loss));
    CHECK(lp.lm_loss > 3.0);  // ~log(100) for a freshly initialized model
    CHECK(double(*t->model.act.scalar(ACT_SCALAR_LM_LOSS)) == lp.lm_loss);
    // The last MoE block's balance and z-loss (one MoE block here) are the slots' values.
    REQUIRE(lp.moe.size() == 1);
    CHECK(*t->model.act.scalar(ACT_SCALAR_BALANCE_LOSS) == lp.moe[0].balance_loss);
    CHECK(*t->model.act.scalar(ACT_SCALAR_Z_LOSS) == lp.moe[0].z_loss);
}

// The KV cache's slots are the table's forward lines (model/activations.h, kv_cache_buffers): one
// copy each, shared by every block, except the keys and values, one per block; no slot of the
// backward or the loss; the expert slots as stored mode's even when training defers them.
TEST_CASE("a KV cache holds the table's forward slots once and each block's keys and values", "[model][inference]") {
    auto t = test::make_test_model(tiny_yaml(), {"train.expert_grads=deferred", "model.qk_norm=per_head"}, 2);
    const ModelConfig& c = t->cfg.model;
    const int64_t max_len = 40;
    const std::vector<BufferSpec> kv = kv_cache_buffers(c, max_len);
    std::set<std::string> names;
    for (const BufferSpec& b : kv) {
        names.insert(b.name);
        CHECK(b.first == Phase::FORWARD);  // all live together: nothing shares bytes
        CHECK(b.last == Phase::OPTIMIZER);
    }
    for (const char* want : {"act.k.0", "act.k.1", "act.v.0", "act.v.1", "act.q", "act.q_pre", "act.ln1_out",
                             "act.block_input", "act.final_input", "act.moe_in", "act.moe_h1", "act.router_logits",
                             "act.final_ln_out", "act.logits", "ws.scalars"})
        CHECK(names.count(want) == 1);
    for (const char* absent : {"act.k", "act.q.0", "act.block_input.0", "act.d_q", "act.d_stream", "act.losses",
                               "act.d_final_ln_out", "act.ep_recv"}) {
        INFO(absent);
        CHECK(names.count(absent) == 0);
    }
    const ActDims D = act_dims(c, 1, max_len, 0);
    for (const BufferSpec& b : kv)
        if (b.name == "act.k.1") CHECK(b.bytes() == max_len * D.kvd * 2);

    MemoryPlan plan;
    plan.buffers = kv;
    plan.offsets = layout_arena(plan.buffers, &plan.peak_bytes);
    Arena arena = allocate_host_arena(plan);
    const ActSlots a = kv_cache_slots_bind(c, max_len, arena);
    REQUIRE(a.k.size() == 2);
    CHECK(static_cast<void*>(a.k[0]) == arena.ptr("act.k.0"));
    CHECK(static_cast<void*>(a.v[1]) == arena.ptr("act.v.1"));
    CHECK(a.q[0] == a.q[1]);  // one working set for both blocks
    CHECK(static_cast<void*>(a.q[1]) == arena.ptr("act.q"));
    CHECK(a.moe_in[1] != nullptr);
    CHECK(a.moe_in[0] == nullptr);  // block 0 is dense
    CHECK(a.d_q == nullptr);
}
