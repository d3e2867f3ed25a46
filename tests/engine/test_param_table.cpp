// The parameter table reproduces the paper's counts (Appendix B) and tiers; is_expert_bank is the one test of a bank.
#include <catch2/catch.hpp>

#include "engine/config.h"
#include "engine/param_table.h"

using namespace skew;

TEST_CASE("the paper's model has the Appendix B parameter counts") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    ParamTable t = build_param_table(c.model);
    CHECK(t.total_numel() == 6784327680);  // the trainer's logged count (docs/optimizers.md §4.3)
    CHECK(t.tier_numel(Tier::EXPERTS) == 128LL * 3 * 4096 * 4096);
    CHECK(t.tier_numel(Tier::ROUTER) == 128 * 4096);
    CHECK(double(t.tier_numel(Tier::BACKBONE)) / 1e6 == Approx(341.4).margin(0.05));
    // token embedding 206.0M, positions 1.0M, attention 83.9M, dense FFN 50.3M, norms 0.04M
    int64_t attn = 0, ffn = 0, norms = 0;
    for (const auto& p : t.params) {
        if (p.role == Role::ATTN_Q || p.role == Role::ATTN_K || p.role == Role::ATTN_V || p.role == Role::ATTN_O)
            attn += p.numel();
        if (p.role == Role::FFN_W1 || p.role == Role::FFN_W2 || p.role == Role::FFN_W3) ffn += p.numel();
        if (p.role == Role::NORM_WEIGHT || p.role == Role::NORM_BIAS) norms += p.numel();
    }
    CHECK(t.find("embed.tokens")->numel() == 50304LL * 4096);
    CHECK(double(attn) / 1e6 == Approx(83.9).margin(0.05));
    CHECK(double(ffn) / 1e6 == Approx(50.3).margin(0.05));
    CHECK(double(norms) / 1e6 == Approx(0.04).margin(0.005));
}

TEST_CASE("names, dtypes and tiers follow the design") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    ParamTable t = build_param_table(c.model);
    const ParamInfo* w1 = t.find("blocks.1.moe.experts.w1");
    REQUIRE(w1);
    CHECK(w1->tier == Tier::EXPERTS);
    CHECK(w1->shape == std::vector<int64_t>{128, 4096, 4096});
    CHECK(w1->n_matrices() == 128);
    CHECK(w1->dtype == DType::BF16);
    const ParamInfo* r = t.find("blocks.1.moe.router.weight");
    REQUIRE(r);
    CHECK(r->tier == Tier::ROUTER);
    CHECK(r->dtype == DType::F32);
    CHECK(t.find("blocks.0.ln1.weight")->dtype == DType::F32);
    CHECK(t.find("blocks.0.ffn.w3")->shape == std::vector<int64_t>{4096, 4096});
    CHECK(t.find("blocks.0.attn.wk")->shape == std::vector<int64_t>{1024, 4096});
    CHECK(t.find("blocks.1.ffn.w1") == nullptr);
    CHECK(t.find("blocks.0.moe.router.weight") == nullptr);
    for (size_t i = 0; i < t.params.size(); ++i) CHECK(t.params[i].index == i);
}

TEST_CASE("an expert-parallel rank's table holds n_experts / M experts of each bank, the rest unchanged") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    const ParamTable whole = build_param_table(c.model);
    for (int64_t r : {0, 3, 7}) {
        const ParamTable t = build_param_table(c.model, ExpertShard{8, r});
        REQUIRE(t.params.size() == whole.params.size());
        for (size_t i = 0; i < t.params.size(); ++i) {
            const ParamInfo &a = t.params[i], &b = whole.params[i];
            CHECK(a.name == b.name);
            CHECK(a.index == b.index);
            if (a.tier == Tier::EXPERTS) {
                CHECK(a.shape == std::vector<int64_t>{16, b.shape[1], b.shape[2]});
                CHECK(a.expert_offset == 16 * r);
                CHECK(a.element_offset() == 16 * r * b.shape[1] * b.shape[2]);
            } else {
                CHECK(a.shape == b.shape);
                CHECK(a.expert_offset == 0);
                CHECK(a.element_offset() == 0);
            }
        }
        CHECK(t.tier_numel(Tier::EXPERTS) == 16LL * 3 * 4096 * 4096);  // one MoE block, 16 of its 128 experts
        CHECK(t.tier_numel(Tier::BACKBONE) == whole.tier_numel(Tier::BACKBONE));
        CHECK(t.active_numel(c.model.top_k, c.model.n_experts) == whole.active_numel(c.model.top_k, c.model.n_experts));
    }
    CHECK(build_param_table(c.model, ExpertShard{1, 0}).total_numel() == whole.total_numel());
    CHECK_THROWS_WITH(build_param_table(c.model, ExpertShard{3, 0}),
                      Catch::Contains("does not divide model.n_experts 128"));
    CHECK_THROWS_WITH(build_param_table(c.model, ExpertShard{8, 8}),
                      Catch::Contains("outside the expert-parallel group"));
    CHECK_THROWS_WITH(build_param_table(c.model, ExpertShard{0, 0}), Catch::Contains("parallel.expert"));
}

TEST_CASE("is_expert_bank: exactly the three stacked expert roles, the experts tier's 3-D tensors") {
    // every role, by its value: only EXPERT_W1, EXPERT_W2 and EXPERT_W3 are banks
    for (int r = int(Role::TOKEN_EMBEDDING); r <= int(Role::ATTN_BIAS); ++r) {
        ParamInfo p;
        p.role = Role(r);
        INFO(choice_name(p.role));
        const bool expert_role = p.role == Role::EXPERT_W1 || p.role == Role::EXPERT_W2 || p.role == Role::EXPERT_W3;
        CHECK(is_expert_bank(p) == expert_role);
    }
    // in the paper's table (whole and one expert-parallel rank's): a bank is an experts-tier tensor,
    // stacked (n_experts, rows, cols), three per MoE block
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    for (const ParamTable& t : {build_param_table(c.model), build_param_table(c.model, ExpertShard{8, 3})}) {
        int banks = 0;
        for (const ParamInfo& p : t.params) {
            INFO(p.name);
            CHECK(is_expert_bank(p) == (p.tier == Tier::EXPERTS));
            CHECK(is_expert_bank(p) == (p.shape.size() == 3));
            banks += is_expert_bank(p);
        }
        CHECK(banks == 3);  // the paper's model has one MoE block
    }
    CHECK(is_expert_bank(*build_param_table(c.model).find("blocks.1.moe.experts.w3")));
    CHECK_FALSE(is_expert_bank(*build_param_table(c.model).find("blocks.1.moe.router.weight")));
}

// model.head_dim independent of d_model / n_heads (Qwen3-30B-A3B: d_model 2048, 32 heads of 128,
// 4 KV heads), with q and k norms and the projections' biases, in Hugging Face's order.
TEST_CASE(
    "head_dim != d_model / n_heads sizes q, k, v and o by n_heads x head_dim, and qk_norm and biases are fp32 "
    "vectors") {
    Config c = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/tiny.yaml");
    c.model.d_model = 2048;
    c.model.n_heads = 32;
    c.model.n_kv_heads = 4;
    c.model.head_dim_key = 128;
    c.model.attention_bias = true;
    for (QkNorm qn : {QkNorm::FULL, QkNorm::PER_HEAD}) {
        c.model.qk_norm = qn;
        const ParamTable t = build_param_table(c.model);
        auto shape = [&](const std::string& n) {
            const ParamInfo* p = t.find("blocks.0." + n);
            REQUIRE(p);
            return p->shape;
        };
        CHECK(shape("attn.wq") == std::vector<int64_t>{4096, 2048});
        CHECK(shape("attn.wk") == std::vector<int64_t>{512, 2048});
        CHECK(shape("attn.wv") == std::vector<int64_t>{512, 2048});
        CHECK(shape("attn.wo") == std::vector<int64_t>{2048, 4096});
        CHECK(shape("attn.bq") == std::vector<int64_t>{4096});
        CHECK(shape("attn.bk") == std::vector<int64_t>{512});
        CHECK(shape("attn.bv") == std::vector<int64_t>{512});
        const bool full = qn == QkNorm::FULL;
        CHECK(shape("attn.q_norm.weight") == std::vector<int64_t>{full ? 4096 : 128});
        CHECK(shape("attn.k_norm.weight") == std::vector<int64_t>{full ? 512 : 128});
        // the order: wq bq wk bk wv bv wo q_norm k_norm, then ln2
        std::vector<std::string> names;
        for (const ParamInfo& p : t.params)
            if (p.block == 0) names.push_back(p.name.substr(9));
        const std::vector<std::string> head(names.begin(), names.begin() + 11);
        CHECK(head == std::vector<std::string>{"ln1.weight", "ln1.bias", "attn.wq", "attn.bq", "attn.wk", "attn.bk",
                                               "attn.wv", "attn.bv", "attn.wo", "attn.q_norm.weight",
                                               "attn.k_norm.weight"});
        for (const ParamInfo& p : t.params) {
            if (p.role != Role::QK_NORM_WEIGHT && p.role != Role::ATTN_BIAS) continue;
            INFO(p.name);
            CHECK(p.tier == Tier::BACKBONE);
            CHECK(p.dtype == DType::F32);
            CHECK(p.is_vector());
        }
    }
    // the defaults add nothing: the paper's table is unchanged
    Config paper = load_config(std::string(SKEW_SOURCE_DIR) + "/configs/paper-6.78b.yaml");
    for (const ParamInfo& p : build_param_table(paper.model).params) {
        CHECK(p.role != Role::QK_NORM_WEIGHT);
        CHECK(p.role != Role::ATTN_BIAS);
    }
}
