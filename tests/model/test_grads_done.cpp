// Model::grads_done (model/model.h): the backward reports every parameter exactly once per
// microbatch, in the order its gradients complete (final LayerNorm, blocks from the last, the
// embeddings), and at the moment of the report each reported gradient already holds its final
// value of the microbatch, the property the overlapped gradient sums rely on
// (train/data_parallel.cpp, docs/distributed.md "Overlap with the backward pass").
#include <catch2/catch.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "model_test_util.h"

using namespace skew;
using namespace skew::test;

namespace {

// Three blocks, MoE at 0 and 2, so dense and MoE blocks both report.
const char* YAML = R"(
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
train:
  batch_size: 8
  seq_len: 32
  microbatch: 4
  seed: 42
runtime:
  backend: cpu
  workspace_gib: 0
)";

std::vector<uint8_t> grad_bytes(const ParamRef& p) {
    const auto* g = static_cast<const uint8_t*>(p.grad.data);
    return std::vector<uint8_t>(g, g + p.numel() * (p.grad.type == ScalarType::BF16 ? 2 : 4));
}

}  // namespace

TEST_CASE("the backward reports each parameter's gradient complete once, in completion order, holding its final value",
          "[model]") {
    for (const char* mode : {"block", "none"}) {
        INFO("train.recompute " << mode);
        auto t = make_test_model(YAML, {std::string("train.recompute=") + mode}, 4);
        Model& m = t->model;
        model_init(m, 42);
        const int64_t T = t->cfg.train.seq_len;
        const std::vector<int32_t> stream = lcg_tokens(8 * T + 1, t->cfg.model.vocab_size, 3);
        model_zero_grads(m);
        // microbatch 0 without the hook: the gradients then hold its contribution
        model_forward_backward(m, stream.data(), stream.data() + 1, 0, 5, 2);
        size_t wq1 = m.params.size();  // blocks.1.attn.wq: complete only after block 1's backward
        for (size_t k = 0; k < m.params.size(); ++k)
            if (m.params[k].info->name == "blocks.1.attn.wq") wq1 = k;
        REQUIRE(wq1 < m.params.size());
        struct Report {
            std::vector<size_t> params;
            std::vector<std::vector<uint8_t>> at_report;  // each reported gradient at the call
            std::vector<uint8_t> wq1_now;                 // blocks.1.attn.wq's gradient at the call
        };
        std::vector<Report> reports;
        m.grads_done = [&](std::span<const size_t> params) {
            Report r;
            r.params.assign(params.begin(), params.end());
            for (size_t k : params) r.at_report.push_back(grad_bytes(m.params[k]));
            r.wq1_now = grad_bytes(m.params[wq1]);
            reports.push_back(std::move(r));
        };
        model_forward_backward(m, stream.data() + 4 * T, stream.data() + 4 * T + 1, 1, 5, 2);
        m.grads_done = nullptr;

        // head, blocks 2, 1, 0, embeddings
        REQUIRE(reports.size() == 5);
        std::vector<int> seen(m.params.size(), 0);
        for (const Report& r : reports)
            for (size_t k : r.params) ++seen[k];
        for (size_t k = 0; k < m.params.size(); ++k) {
            INFO(m.params[k].info->name);
            CHECK(seen[k] == 1);
        }
        auto names = [&](const Report& r) {
            std::vector<std::string> n;
            for (size_t k : r.params) n.push_back(m.params[k].info->name);
            return n;
        };
        CHECK(names(reports[0]) == std::vector<std::string>{"final_ln.weight", "final_ln.bias"});
        CHECK(names(reports[4]) == std::vector<std::string>{"embed.tokens", "embed.positions"});
        for (int i = 1; i <= 3; ++i) {
            const int block = 3 - i;
            for (size_t k : reports[size_t(i)].params) CHECK(m.params[k].info->block == block);
        }
        // at each report the reported gradients already held their final bits
        for (const Report& r : reports)
            for (size_t j = 0; j < r.params.size(); ++j) {
                INFO(m.params[r.params[j]].info->name);
                CHECK(r.at_report[j] == grad_bytes(m.params[r.params[j]]));
            }
        // and the comparison can fail: when block 2 reported, block 1's gradients still held only
        // microbatch 0's contribution; when block 1 reported, their final value
        CHECK(reports[1].wq1_now != grad_bytes(m.params[wq1]));
        CHECK(reports[2].wq1_now == grad_bytes(m.params[wq1]));
    }
}
