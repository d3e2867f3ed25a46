// Faults: a NaN or inf in the loss or gradient norm is caught, reported with the step and the
// first tensor holding it, and the step skipped up to train.max_skipped_steps, then the run stops.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "train/faults.h"
#include "train_test_util.h"

using namespace skew;
using namespace train_test;

namespace {

void put(const NamedTensor& t, int64_t i, float v) {
    if (t.dtype == DType::BF16) {
        uint16_t h = uint16_t(std::bit_cast<uint32_t>(v) >> 16);
        std::memcpy(static_cast<char*>(t.data) + 2 * i, &h, 2);
    } else {
        std::memcpy(static_cast<char*>(t.data) + 4 * i, &v, 4);
    }
}

const NamedTensor& find(const std::vector<NamedTensor>& ts, const std::string& part, size_t rank) {
    for (const auto& t : ts)
        if (t.name.find(part) != std::string::npos && t.shape.size() == rank) return t;
    FAIL("no tensor named *" << part << "* of rank " << rank);
    return ts.front();
}

}  // namespace

TEST_CASE("a NaN injected into a gradient is caught and reported with the step and the tensor") {
    auto r = make_run();
    fill(*r, 1);
    auto grads = buffer_tensors(r->arena, BufferKind::GRAD);
    REQUIRE(!first_non_finite(grads));
    const NamedTensor& bank = find(grads, "experts.w1", 3);  // an expert bank (n_experts, rows, cols)
    const int64_t i = 2 * bank.shape[1] * bank.shape[2] + 5 * bank.shape[2] + 3;  // expert 2, row 5, col 3
    put(bank, i, std::nanf(""));
    put(bank, i + 7, std::numeric_limits<float>::infinity());  // a later one is not reported
    SkipPolicy policy{10, 0};
    auto rep = check_step_finite(42, 3.5, std::nan(""), grads, policy);
    REQUIRE(rep);
    REQUIRE(rep->first);
    CHECK(rep->first->tensor == bank.name);
    CHECK(rep->first->index == i);
    CHECK(rep->first->coords == std::vector<int64_t>{2, 5, 3});
    CHECK(std::isnan(rep->first->value));
    CHECK(rep->action == FaultAction::SKIP);
    std::string msg = fault_message(*rep);
    CHECK_THAT(msg, Catch::StartsWith("step 42: non-finite grad norm (nan)") &&
                        Catch::Contains(bank.name + "[2, 5, 3] = nan") &&
                        Catch::Contains("step skipped (1 of 10 allowed)"));
}

TEST_CASE("the first non-finite tensor is found in plan order, in fp32 and bf16") {
    auto r = make_run();
    fill(*r, 1);
    auto grads = buffer_tensors(r->arena, BufferKind::GRAD);
    const NamedTensor& f32 = find(grads, "ln2.weight", 1);  // a LayerNorm gain (fp32)
    REQUIRE(f32.dtype == DType::F32);
    put(f32, 0, -std::numeric_limits<float>::infinity());
    auto nf = first_non_finite(grads);
    REQUIRE(nf);
    // Whichever comes first in the plan is reported: here the only one.
    CHECK(nf->tensor == f32.name);
    CHECK(nf->value == -std::numeric_limits<double>::infinity());
    const NamedTensor& first = grads.front();
    put(first, 1, std::numeric_limits<float>::infinity());
    nf = first_non_finite(grads);
    REQUIRE(nf);
    CHECK(nf->tensor == first.name);
    CHECK(nf->index == 1);
}

TEST_CASE("a finite step is not scanned and not counted") {
    SkipPolicy policy{0, 0};
    CHECK(!check_step_finite(1, 2.0, 0.5, {}, policy));
    CHECK(policy.skipped == 0);
}

TEST_CASE("steps are skipped up to max_skipped_steps, then the run stops") {
    SkipPolicy policy{2, 0};
    float bad = std::nanf("");
    std::vector<NamedTensor> ts{NamedTensor{"grad.x", DType::F32, {1}, &bad}};
    CHECK(check_step_finite(5, std::nan(""), 1.0, ts, policy)->action == FaultAction::SKIP);
    CHECK(check_step_finite(6, INFINITY, 1.0, ts, policy)->action == FaultAction::SKIP);
    auto third = check_step_finite(9, std::nan(""), 1.0, ts, policy);
    CHECK(third->action == FaultAction::STOP);
    CHECK(policy.skipped == 3);
    CHECK_THAT(fault_message(*third),
               Catch::Contains("step 9: non-finite loss (nan)") &&
                   Catch::Contains("stopping: 3 non-finite steps exceed train.max_skipped_steps = 2"));
    SkipPolicy none{0, 0};
    CHECK(check_step_finite(1, NAN, 1.0, ts, none)->action == FaultAction::STOP);
}

TEST_CASE("a non-finite loss with finite gradients says no tensor holds one") {
    SkipPolicy policy{10, 0};
    float ok = 1.0f;
    auto rep = check_step_finite(3, INFINITY, 2.0, {NamedTensor{"grad.x", DType::F32, {1}, &ok}}, policy);
    REQUIRE(rep);
    CHECK(!rep->first);
    CHECK_THAT(fault_message(*rep), Catch::Contains("non-finite loss (inf)") &&
                                        Catch::Contains("no scanned tensor holds a non-finite value"));
}
