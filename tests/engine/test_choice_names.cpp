// Every named enum's table (engine/choice_names.h): each value of the enum has exactly one name, the
// names are distinct, parse_choice inverts choice_name, and fmt prints the name.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <set>
#include <string>

#include "engine/config.h"
#include "engine/config_schema.h"
#include "engine/memory_plan.h"
#include "engine/param_table.h"

using namespace skew;

namespace {

// The table of E lists the values 0 .. n_values-1, each once, under distinct names that parse back.
template <NamedChoice E>
void check_table(size_t n_values) {
    const auto& items = ChoiceNames<E>::items;
    CHECK(items.size() == n_values);
    std::set<int> values;
    std::set<std::string_view> names;
    for (const auto& [v, n] : items) {
        INFO(n);
        CHECK(int(v) >= 0);
        CHECK(size_t(v) < n_values);
        values.insert(int(v));
        names.insert(n);
        CHECK(!n.empty());
        CHECK(choice_name(v) == n);
        CHECK(parse_choice<E>(n) == v);
        CHECK(fmt::format("{}", v) == n);
    }
    CHECK(values.size() == n_values);
    CHECK(names.size() == n_values);
}

}  // namespace

TEST_CASE("every enum table names each value once and parses its names back") {
    check_table<ExpertGrads>(2);
    check_table<IdleExperts>(2);
    check_table<Recompute>(3);
    check_table<BackendChoice>(3);
    check_table<GradDtype>(2);
    check_table<Positions>(2);
    check_table<NormKind>(2);
    check_table<QkNorm>(3);
    check_table<SharedExpertGate>(2);
    check_table<OptimizerType>(size_t(OptimizerType::GALORE_PAPER) + 1);
    check_table<MomentumKind>(2);
    check_table<SecondMomentKind>(3);
    check_table<Rounding>(3);
    check_table<WeightDecayMode>(2);
    check_table<DType>(size_t(DType::U16) + 1);
    check_table<Tier>(N_TIERS);
    check_table<Role>(size_t(Role::SHARED_EXPERT_GATE) + 1);
    check_table<StateKind>(size_t(StateKind::GALORE_V) + 1);
    check_table<KeyType>(size_t(KeyType::STRING_LIST) + 1);
}

TEST_CASE("names outside a table parse to nothing, and messages list the names") {
    CHECK_FALSE(parse_choice<OptimizerType>("adam").has_value());
    CHECK_FALSE(parse_choice<Rounding>("Stochastic").has_value());
    CHECK(choice_list<Recompute>() == "block, attention or none");
    CHECK(choice_names<MomentumKind>() == std::vector<std::string>{"none", "fp32"});
    CHECK(choice_name(DType::F32) == "fp32");
    CHECK(choice_name(StateKind::SECOND_ROW) == "row");
}

TEST_CASE("the built-in optimizers are one table: each name gives its own preset") {
    const std::vector<std::string>& names = builtin_optimizer_names();
    CHECK(names.size() == 11);
    CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
    for (const std::string& n : names) {
        INFO(n);
        const OptimizerConfig o = builtin_optimizer(n);
        CHECK(o.name == n);
        // a preset named after its type has that type
        if (const auto t = parse_choice<OptimizerType>(n)) CHECK(o.type == *t);
    }
    CHECK(builtin_optimizer("muon-kj").type == OptimizerType::MUON_KJ);
    CHECK(uses_muon_step(builtin_optimizer("muon-kj").type));
    CHECK(builtin_optimizer("skewadam-expert-momentum").tiers[size_t(Tier::EXPERTS)].momentum == MomentumKind::FP32);
    CHECK(builtin_optimizer("lion").lr == 1e-4);
    CHECK_THROWS_WITH(builtin_optimizer("adam"), Catch::Contains("built-ins are: skewadam, adamw, muon"));
}
