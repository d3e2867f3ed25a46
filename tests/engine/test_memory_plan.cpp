// The memory plan reproduces the paper's state sizes (Table 1, Table 3, Appendix B) for every
// optimizer, and the arena laid out from it is aligned, 64-bit and overlap-free.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/arena.h"
#include "engine/config.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "kernels/cuda/workspace_sizes.h"
#include "plan/plan.h"

using namespace skew;

namespace {
const Config& paper() {
    static Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    return c;
}
double state_gib(const std::string& name) {
    ParamTable t = build_param_table(paper().model);
    int64_t b = 0;
    for (const auto& s : optimizer_state_buffers(builtin_optimizer(name), t)) b += s.bytes();
    return double(b) / GIB;
}
double paper_gib(const std::string& name) {
    ParamTable t = build_param_table(paper().model);
    return double(paper_state_bytes(builtin_optimizer(name), t)) / GIB;
}
double round2(double x) { return std::round(x * 100) / 100; }
}  // namespace

TEST_CASE("optimizer state matches the paper's Table 1 and Table 3 to 0.01 GiB") {
    CHECK(round2(state_gib("skewadam")) == Approx(1.29));
    CHECK(round2(state_gib("adamw")) == Approx(50.55));
    CHECK(round2(state_gib("lion")) == Approx(25.27));
    CHECK(round2(paper_gib("muon")) == Approx(25.27));
    // the footnote: Muon's internal Adam on embeddings, positions, router and vectors adds ~0.8 GB
    CHECK(state_gib("muon") - paper_gib("muon") == Approx(0.77).margin(0.01));
    CHECK(round2(state_gib("adafactor")) == Approx(0.01));
    CHECK(round2(state_gib("skewadam-expert-momentum")) == Approx(25.29));
    CHECK(round2(state_gib("skewadam-factored-router")) == Approx(1.28));
    CHECK(round2(state_gib("uniform")) == Approx(25.29));
}

TEST_CASE("SkewAdam's Appendix B components") {
    ParamTable t = build_param_table(paper().model);
    MemoryPlan p = build_memory_plan(paper(), t, builtin_optimizer("skewadam"), 8);
    auto mib = [&](const std::string& name) {
        for (const auto& c : p.state_components)
            if (c.name == name) return std::round(double(c.bytes) / MIB * 10) / 10;
        FAIL("no component " << name);
        return 0.0;
    };
    CHECK(mib("Backbone momentum (fp32)") == Approx(1302.2));
    CHECK(mib("Backbone factored 2nd moments") == Approx(0.5));
    CHECK(mib("Backbone vector params (norms), full 2nd moment") == Approx(0.2));
    CHECK(mib("Expert factored 2nd moments") == Approx(12.0));
    CHECK(mib("Router full 2nd moment") == Approx(2.0));
    // 12.0 MiB is 128 x 3 x (4096 + 4096) fp32 values: each expert matrix is its own W.
    int64_t expert_bytes = 0;
    for (const auto& c : p.state_components)
        if (c.name == "Expert factored 2nd moments") expert_bytes = c.bytes;
    CHECK(expert_bytes == 128LL * 3 * (4096 + 4096) * 4);
    CHECK(round2(double(p.weights_bytes) / GIB) == Approx(12.64));
}

TEST_CASE("the arena's total equals the plan's peak, and every buffer is aligned and in bounds") {
    ParamTable t = build_param_table(paper().model);
    for (const std::string name : {"skewadam", "adamw", "muon", "galore"}) {
        MemoryPlan p = build_memory_plan(paper(), t, builtin_optimizer(name), 8);
        int64_t total = 0;
        std::vector<int64_t> offs = layout_arena(p.buffers, &total);
        CHECK(total == p.peak_bytes);  // the layout is deterministic
        CHECK(offs == p.offsets);
        // Bounds independent of the layout algorithm: no valid layout holds less than the bytes live
        // in its busiest phase, and none needs more than every buffer back to back (aligned).
        int64_t back_to_back = 0, by_kind[5] = {0, 0, 0, 0, 0};
        int64_t live[4] = {0, 0, 0, 0};
        for (const BufferSpec& b : p.buffers) {
            back_to_back += (b.bytes() + ARENA_ALIGNMENT - 1) / ARENA_ALIGNMENT * ARENA_ALIGNMENT;
            by_kind[int(b.kind)] += b.bytes();
            for (int ph = 0; ph < 4; ++ph) live[ph] += b.lives_in(Phase(ph)) ? b.bytes() : 0;
        }
        const int64_t busiest = *std::max_element(live, live + 4);
        INFO(name << ": peak " << p.peak_bytes << ", busiest phase " << busiest << ", back to back " << back_to_back);
        CHECK(p.peak_bytes >= busiest);
        CHECK(p.peak_bytes <= back_to_back);
        CHECK(p.weights_bytes == by_kind[int(BufferKind::WEIGHT)]);
        CHECK(p.grads_bytes == by_kind[int(BufferKind::GRAD)]);
        CHECK(p.state_bytes == by_kind[int(BufferKind::STATE)]);
        int64_t persistent = p.weights_bytes + p.grads_bytes + p.state_bytes;
        CHECK(p.peak_bytes >= persistent + p.workspace_bytes);
        for (size_t i = 0; i < p.buffers.size(); ++i) {
            CHECK(p.offsets[i] % ARENA_ALIGNMENT == 0);
            CHECK(p.offsets[i] + p.buffers[i].bytes() <= p.peak_bytes);
        }
    }
}

TEST_CASE("buffers overlap only where their lifetimes are disjoint") {
    ParamTable t = build_param_table(paper().model);
    const std::string mode = GENERATE("stored", "deferred");
    Config cfg = paper();
    cfg.train.expert_grads = *parse_choice<ExpertGrads>(mode);
    MemoryPlan p = build_memory_plan(cfg, t, builtin_optimizer("muon"), 8);
    int shared = 0, with_logits = 0;
    for (size_t i = 0; i < p.buffers.size(); ++i) {
        for (size_t j = i + 1; j < p.buffers.size(); ++j) {
            const auto &a = p.buffers[i], &b = p.buffers[j];
            bool bytes_overlap = p.offsets[i] < p.offsets[j] + b.bytes() && p.offsets[j] < p.offsets[i] + a.bytes();
            bool lifetimes_meet = false;
            for (int ph = 0; ph < 4; ++ph)
                lifetimes_meet = lifetimes_meet || (a.lives_in(Phase(ph)) && b.lives_in(Phase(ph)));
            if (bytes_overlap) {
                INFO(mode << ": " << a.name << " overlaps " << b.name);
                CHECK_FALSE(lifetimes_meet);
                ++shared;
                if (a.name == "act.logits" || b.name == "act.logits") {
                    // the head's logits take the bytes of a block's working slots, which hold nothing then
                    const BufferSpec& other = a.name == "act.logits" ? b : a;
                    CHECK((other.dead_in_head || other.first > Phase::HEAD || other.last < Phase::HEAD));
                    with_logits += other.dead_in_head ? 1 : 0;
                }
            }
        }
    }
    CHECK(shared > 0);       // the optimizer workspace reuses activation bytes
    CHECK(with_logits > 0);  // and the LM head's logits reuse the block's working slots
    // only the block's working slots skip the head: what holds data across it does not
    for (const char* kept :
         {"act.tokens", "act.targets", "act.block_input.0", "act.final_input", "act.d_stream", "ws.cuda_scratch"})
        CHECK_FALSE(p.buffers[size_t(p.find(kept))].dead_in_head);
    CHECK(p.buffers[size_t(p.find("act.moe_out"))].dead_in_head);
    CHECK(p.buffers[size_t(p.find("act.ln1_out"))].dead_in_head);
}

TEST_CASE("offsets are 64-bit: a layout beyond 2^31 elements") {
    ParamTable t = build_param_table(paper().model);
    MemoryPlan p = build_memory_plan(paper(), t, builtin_optimizer("adamw"), 8);
    int w1 = p.find("weight.blocks.1.moe.experts.w1");
    REQUIRE(w1 >= 0);
    CHECK(p.buffers[size_t(w1)].numel() == (int64_t(1) << 31));  // 128 x 4096 x 4096
    int last = p.find("state.blocks.1.moe.experts.w3.v");
    REQUIRE(last >= 0);
    CHECK(p.offsets[size_t(last)] > (int64_t(1) << 36));
    CHECK(p.peak_bytes > (int64_t(1) << 36));
}

TEST_CASE("the plan grows with the microbatch and the largest fitting microbatch respects the budget") {
    ParamTable t = build_param_table(paper().model);
    OptimizerConfig o = builtin_optimizer("skewadam");
    MemoryPlan p1 = build_memory_plan(paper(), t, o, 1), p8 = build_memory_plan(paper(), t, o, 8),
               p64 = build_memory_plan(paper(), t, o, 64);
    CHECK(p1.peak_bytes < p8.peak_bytes);
    CHECK(p8.peak_bytes < p64.peak_bytes);
    CHECK(p1.state_bytes == p64.state_bytes);
    const int64_t budget = p8.peak_bytes;  // exactly microbatch 8
    CHECK(largest_fitting_microbatch(paper(), t, o, budget) == 8);
    CHECK(largest_fitting_microbatch(paper(), t, o, budget - 1) == 4);
    CHECK(largest_fitting_microbatch(paper(), t, o, int64_t(20 * GIB)) == 0);
    CHECK_THROWS_AS(build_memory_plan(paper(), t, o, 7), Error);
}

TEST_CASE("a host arena gives every buffer its planned bytes") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml");
    ParamTable t = build_param_table(c.model);
    MemoryPlan p = build_memory_plan(c, t, builtin_optimizer("skewadam"), 4);
    Arena a = allocate_host_arena(p);
    CHECK(a.bytes == p.peak_bytes);
    CHECK(reinterpret_cast<uintptr_t>(a.base) % ARENA_ALIGNMENT == 0);
    // Fill every persistent buffer with its own index, then read them all back.
    for (size_t i = 0; i < p.buffers.size(); ++i)
        if (p.buffers[i].last == Phase::OPTIMIZER && p.buffers[i].first == Phase::FORWARD)
            std::memset(a.ptr(int(i)), int(i % 251), size_t(p.buffers[i].bytes()));
    for (size_t i = 0; i < p.buffers.size(); ++i) {
        if (!(p.buffers[i].last == Phase::OPTIMIZER && p.buffers[i].first == Phase::FORWARD)) continue;
        if (p.buffers[i].bytes() == 0) continue;
        const unsigned char* b = static_cast<const unsigned char*>(a.ptr(int(i)));
        int64_t n = p.buffers[i].bytes();
        CHECK(b[0] == i % 251);
        CHECK(b[n - 1] == i % 251);
    }
    CHECK(a.get<float>("state.embed.tokens.m") != nullptr);
    CHECK_THROWS_AS(a.ptr("weight.nope"), Error);
}

TEST_CASE(
    "a CUDA plan holds the CUDA backend's scratch: ops, the fused LM head, the router's widening, the optimizer") {
    Config cuda = paper();
    cuda.runtime.backend = BackendChoice::CUDA;
    Config cpu = paper();
    cpu.runtime.backend = BackendChoice::CPU;
    ParamTable t = build_param_table(paper().model);
    const int64_t mb = 8, T = paper().train.seq_len, N = mb * T;
    const ModelConfig& m = paper().model;
    for (const char* name : {"skewadam", "adamw", "muon", "adafactor"}) {
        INFO(name);
        OptimizerConfig opt = builtin_optimizer(name);
        MemoryPlan pc = build_memory_plan(cuda, t, opt, mb), pp = build_memory_plan(cpu, t, opt, mb);
        const int s = pc.find("ws.cuda_scratch"), w = pc.find("ws.cuda_widen"), o = pc.find("ws.optimizer"),
                  l = pc.find("act.logits");
        REQUIRE(s >= 0);
        REQUIRE(w >= 0);
        CHECK(pp.find("ws.cuda_scratch") < 0);
        CHECK(pp.find("ws.cuda_widen") < 0);
        const int64_t scratch = pc.buffers[size_t(s)].bytes();
        // Paper shapes (1024 tokens, d_model 4096, 50,304 rows): the embedding backward's sort of
        // token ids over the vocabulary is the largest op scratch: 2 chunks x 50,304 keys x 4 B
        // + 50,304 x 8 B totals + positions and offsets.
        const int64_t emb = cuda_ws::align16(N * 8) + cuda_ws::align16((m.padded_vocab_size + 1) * 8) +
                            cuda_ws::align16(2 * m.padded_vocab_size * 4) + m.padded_vocab_size * 8;
        CHECK(scratch >= emb);
        CHECK(scratch < emb + 256);
        CHECK(scratch >= cuda_ws::layernorm_backward_scratch_bytes(N, m.d_model));
        CHECK(scratch >= cuda_ws::moe_dispatch_scratch_bytes(N, m.top_k, m.n_experts));
        CHECK(scratch >= cuda_ws::moe_matmul_scratch_bytes(m.n_experts));  // the grouped GEMM's pointers
        // The router's bf16 (N, d_model) operand widened to fp32.
        CHECK(pc.buffers[size_t(w)].numel() >= N * m.d_model);
        // The fused head's workspace fits act.logits, so the model takes the fused path on the GPU:
        // at 1,024 tokens 640-token chunks of fp32 logits and the bf16 dlogits of all 1,024 tokens
        // (232 MB; one chunk would take 6 B x 1,024 x 50,304 = 309 MB), no fp32 dwte accumulator.
        CHECK(cuda_ws::lm_head_layout(N, m.d_model, m.padded_vocab_size, true).chunk_tokens == 640);
        CHECK(cuda_ws::lm_head_layout(N, m.d_model, m.padded_vocab_size, true).whole_dlogits);
        CHECK(cuda_ws::lm_head_workspace_bytes(N, m.d_model, m.padded_vocab_size, true) ==
              cuda_ws::align256(640 * m.padded_vocab_size * 4) + cuda_ws::align256(N * m.padded_vocab_size * 2) +
                  N * 4);
        CHECK(pc.buffers[size_t(l)].bytes() >=
              cuda_ws::lm_head_workspace_bytes(N, m.d_model, m.padded_vocab_size, true));
        CHECK(pc.buffers[size_t(o)].bytes() >= cuda_optimizer_scratch_bytes(opt, t));
        // The workspace total counts the library workspace and the CUDA scratch.
        CHECK(pc.workspace_bytes == pp.workspace_bytes + scratch + pc.buffers[size_t(w)].bytes());
    }
    // The fused head's layouts (kernels/cuda/workspace_sizes.h lm_head_layout), paper vocabulary (50,304
    // rows, so 2^25 fp32 logits are 667 tokens, 640 as a multiple of 64) and d_model 4096:
    const int64_t Vp = m.padded_vocab_size;
    auto ws_bytes = [&](int64_t n, int64_t d, bool bf16) { return cuda_ws::lm_head_workspace_bytes(n, d, Vp, bf16); };
    // - up to 640 tokens one chunk: fp32 logits and bf16 dlogits, 6 B per logit
    CHECK(cuda_ws::lm_head_layout(640, m.d_model, Vp, true).chunk_tokens == 640);
    CHECK(ws_bytes(640, m.d_model, true) == 640 * Vp * 6 + 640 * 4);
    CHECK(ws_bytes(640, m.d_model, false) == 640 * Vp * 4 + 640 * 4);  // fp32: dlogits in place
    // - microbatch 16 (2,048 tokens) and 64 (8,192): 640-token chunks of fp32 logits and the bf16
    //   dlogits of every token: 335 MB at 2,048 tokens where one chunk would be 618 MB
    for (const int64_t n : {16 * T, 64 * T}) {
        const cuda_ws::LmHeadLayout lay = cuda_ws::lm_head_layout(n, m.d_model, Vp, true);
        CHECK(lay.chunk_tokens == 640);
        CHECK(lay.whole_dlogits);
        CHECK(ws_bytes(n, m.d_model, true) == cuda_ws::align256(640 * Vp * 4) + cuda_ws::align256(n * Vp * 2) + n * 4);
        CHECK(ws_bytes(n, m.d_model, true) < n * Vp * 6);
    }
    CHECK(ws_bytes(16 * T, m.d_model, true) < 336'000'000);
    // - beyond 640 + 2 x 4,096 tokens: one chunk's dlogits and the fp32 dwte accumulator, less memory
    CHECK(!cuda_ws::lm_head_layout(3 * 64 * T, m.d_model, Vp, true).whole_dlogits);
    CHECK(ws_bytes(3 * 64 * T, m.d_model, true) == cuda_ws::align256(640 * Vp * 4) + cuda_ws::align256(640 * Vp * 2) +
                                                       cuda_ws::align256(Vp * m.d_model * 4) + 3 * 64 * T * 4);
    // - fp32 operands: never whole dlogits; the accumulator beyond one chunk
    CHECK(!cuda_ws::lm_head_layout(16 * T, m.d_model, Vp, false).whole_dlogits);
    CHECK(ws_bytes(16 * T, m.d_model, false) ==
          cuda_ws::align256(640 * Vp * 4) + cuda_ws::align256(Vp * m.d_model * 4) + 16 * T * 4);
    // - the op table's large LM head rows (tests/backend_ops/cases_loss.cpp) take the layouts they name
    CHECK(cuda_ws::lm_head_layout(700, 4, Vp, true).chunk_tokens == 640);
    CHECK(!cuda_ws::lm_head_layout(700, 4, Vp, true).whole_dlogits);         // 700 > 640 + 2 x 4: the accumulator
    CHECK(cuda_ws::lm_head_layout(650, 8, Vp, true).whole_dlogits);          // 650 <= 640 + 2 x 8
    CHECK(cuda_ws::lm_head_layout(1300, 4, Vp, false).chunk_tokens == 640);  // three chunks
    CHECK(cuda_ws::lm_head_layout(660, 4, Vp, false).chunk_tokens == 640);   // two
    // SkewAdam's largest fused update: one expert tensor of 128 matrices 4096 x 4096 (row and
    // column means fp32) and the router's 1 x numel second moment are both covered.
    OptimizerConfig skew = builtin_optimizer("skewadam");
    CHECK(cuda_optimizer_scratch_bytes(skew, t) >= cuda_ws::optim_update_scratch_bytes(128, 4096, 4096));
    CHECK(cuda_optimizer_scratch_bytes(builtin_optimizer("adamw"), t) == 0);
    // Muon: bf16 Newton-Schulz of one chunk of 4096 x 4096 experts (X, next X, A, B: 128 MiB each
    // matrix; MUON_CHUNK_BYTES holds 4), the cuBLASLt workspace and the norm partials.
    CHECK(cuda_ws::muon_chunk_matrices(128, 4096, 4096) == 4);
    CHECK(cuda_optimizer_scratch_bytes(builtin_optimizer("muon"), t) == cuda_ws::muon_scratch_bytes(128, 4096, 4096));
    CHECK(cuda_ws::muon_scratch_bytes(128, 4096, 4096) ==
          cuda_ws::MUON_LT_WORKSPACE_BYTES + (int64_t(512) << 20) + 2048);
    // GaLore (paper form, rank 128): the largest projected matrix is the 50,304 x 4096 embedding,
    // one matrix per chunk (widened G and back-projection fp32, 128 x 128 projected, 50,304 x 128).
    CHECK(cuda_ws::galore_chunk_matrices(1, 50304, 4096, 128, true) == 1);
    CHECK(cuda_optimizer_scratch_bytes(builtin_optimizer("galore-paper"), t) ==
          cuda_ws::galore_scratch_bytes(1, 50304, 4096, 128, true));
    CHECK(cuda_ws::galore_chunk_matrices(128, 4096, 4096, 128, false) == 3);
    // auto plans for the GPU; the trainer replans with the backend it resolved.
    CHECK(plan_backend(paper()) == BackendChoice::CUDA);
    CHECK(plan_backend(cpu) == BackendChoice::CPU);
}

TEST_CASE("the arena layout is first fit over every conflicting buffer, checked against the direct search") {
    // The direct search (each buffer against every buffer placed before it) on random lifetimes, sizes
    // (empty ones included) and head-dead slots: layout_arena's merged per-phase intervals must give
    // the same offsets, and no two buffers that share a phase may share a byte.
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<BufferSpec> buffers;
        for (int i = 0; i < 300; ++i) {
            BufferSpec b;
            b.name = "b";
            b.name += std::to_string(i);
            b.kind = BufferKind::ACTIVATION;
            b.dtype = DType::BF16;
            const int64_t sizes[] = {0, 1, 128, 129, 4096, 10000, int64_t(rng() % 100000)};
            b.shape = {sizes[rng() % 7]};
            b.first = Phase(rng() % 4);
            b.last = Phase(int(b.first) + int(rng() % (4 - int(b.first))));
            b.dead_in_head = b.first == Phase::FORWARD && b.last == Phase::BACKWARD && rng() % 2;
            buffers.push_back(b);
        }
        int64_t total = 0;
        const std::vector<int64_t> offsets = layout_arena(buffers, &total);
        auto align = [](int64_t x) { return (x + ARENA_ALIGNMENT - 1) / ARENA_ALIGNMENT * ARENA_ALIGNMENT; };
        auto conflict = [&](size_t i, size_t j) {
            for (int p = 0; p < 4; ++p)
                if (buffers[i].lives_in(Phase(p)) && buffers[j].lives_in(Phase(p))) return true;
            return false;
        };
        // The direct search, in layout_arena's order: persistent first, then largest first (stable).
        std::vector<int64_t> expect(buffers.size(), -1);
        int64_t base = 0;
        std::vector<size_t> rest;
        for (size_t i = 0; i < buffers.size(); ++i) {
            if (buffers[i].first == Phase::FORWARD && buffers[i].last == Phase::OPTIMIZER)
                expect[i] = base, base = align(base + buffers[i].bytes());
            else rest.push_back(i);
        }
        std::stable_sort(rest.begin(), rest.end(),
                         [&](size_t a, size_t b) { return buffers[a].bytes() > buffers[b].bytes(); });
        std::vector<size_t> placed;
        for (size_t i : rest) {
            std::vector<std::pair<int64_t, int64_t>> busy;
            for (size_t j : placed)
                if (buffers[j].bytes() > 0 && conflict(i, j))
                    busy.emplace_back(expect[j], align(expect[j] + buffers[j].bytes()));
            std::sort(busy.begin(), busy.end());
            int64_t at = base;
            for (auto [b, e] : busy) {
                if (b >= at + align(buffers[i].bytes())) break;
                at = std::max(at, e);
            }
            expect[i] = at;
            placed.push_back(i);
        }
        CHECK(offsets == expect);
        int64_t end = base;
        for (size_t i = 0; i < buffers.size(); ++i) end = std::max(end, offsets[i] + align(buffers[i].bytes()));
        CHECK(total == end);
        int overlaps = 0, pairs = 0;
        for (size_t i = 0; i < buffers.size(); ++i)
            for (size_t j = i + 1; j < buffers.size(); ++j)
                if (conflict(i, j) && buffers[i].bytes() > 0 && buffers[j].bytes() > 0) {
                    ++pairs;
                    overlaps += !(offsets[i] + buffers[i].bytes() <= offsets[j] ||
                                  offsets[j] + buffers[j].bytes() <= offsets[i]);
                }
        CHECK(pairs > 1000);
        CHECK(overlaps == 0);
    }
}

// model.qk_norm and model.attention_bias (docs/architectures.md, "Tensor roles and the tier policy"):
// the q and k norm weights and the q, k, v biases are backbone vectors, so SkewAdam's Appendix B
// rows count them as the norms (momentum and a full second moment, fp32) and Muon's internal Adam
// takes them; their activation slots are planned per block under train.recompute: none.
TEST_CASE(
    "QK-norm weights and attention biases are backbone vectors in the Appendix B rows, and their slots are planned") {
    Config c = paper();
    c.model.qk_norm = QkNorm::FULL;
    c.model.attention_bias = true;
    const ParamTable t0 = build_param_table(paper().model), t = build_param_table(c.model);
    const int64_t qd = 4096, kvd = 8 * 128;
    const int64_t extra = 2 * (qd + kvd + qd + 2 * kvd);  // 2 blocks: q_norm, k_norm, bq, bk, bv
    REQUIRE(t.total_numel() - t0.total_numel() == extra);
    CHECK(t.tier_numel(Tier::BACKBONE) - t0.tier_numel(Tier::BACKBONE) == extra);
    auto component = [](const MemoryPlan& p, const std::string& name) {
        for (const auto& x : p.state_components)
            if (x.name == name) return x.bytes;
        FAIL("no component " << name);
        return int64_t(0);
    };
    const MemoryPlan s0 = build_memory_plan(paper(), t0, builtin_optimizer("skewadam"), 8);
    const MemoryPlan s = build_memory_plan(c, t, builtin_optimizer("skewadam"), 8);
    for (const char* row : {"Backbone momentum (fp32)", "Backbone vector params (norms), full 2nd moment"}) {
        INFO(row);
        CHECK(component(s, row) - component(s0, row) == 4 * extra);
    }
    CHECK(component(s, "Backbone factored 2nd moments") == component(s0, "Backbone factored 2nd moments"));
    const MemoryPlan m0 = build_memory_plan(paper(), t0, builtin_optimizer("muon"), 8);
    const MemoryPlan m = build_memory_plan(c, t, builtin_optimizer("muon"), 8);
    const std::string adam = "Internal Adam m, v (embeddings, positions, router, vectors)";
    CHECK(component(m, adam) - component(m0, adam) == 8 * extra);

    c.train.recompute = Recompute::NONE;
    const MemoryPlan n = build_memory_plan(c, t, builtin_optimizer("skewadam"), 8);
    const int64_t N = 8 * 128;
    for (int b = 0; b < 2; ++b) {
        const std::string k = "." + std::to_string(b);
        REQUIRE(n.find("act.q_pre" + k) >= 0);
        CHECK(n.buffers[size_t(n.find("act.q_pre" + k))].bytes() == N * qd * 2);
        CHECK(n.buffers[size_t(n.find("act.k_pre" + k))].bytes() == N * kvd * 2);
        CHECK(n.buffers[size_t(n.find("act.q_rstd" + k))].bytes() == N * 4);  // full: one rstd per token
        CHECK(n.buffers[size_t(n.find("act.k_rstd" + k))].bytes() == N * 4);
    }
    CHECK(build_memory_plan(paper(), t0, builtin_optimizer("skewadam"), 8).find("act.q_pre") < 0);
}
