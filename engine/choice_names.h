// One naming mechanism for every enum: a value's name as configs, files, logs and messages spell
// it. Each enum that is ever printed or parsed declares one table, ChoiceNames<E>, next to the enum;
// the functions here serve the parser, the schema's allowed values and every message from it
// (docs/architecture.md, "Code layout").
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skew {

/// The name table of an enum: every value with the name it is spelled by, in documentation order.
/// A specialization holds `static constexpr std::array<std::pair<E, std::string_view>, N> items`.
template <typename E>
struct ChoiceNames;

/// The enums that have a name table.
template <typename E>
concept NamedChoice = requires {
    ChoiceNames<E>::items;
};

/// The name of `e` (e.g. "deferred"); "?" for a value outside the table. The view is of a string
/// literal, so `.data()` is null-terminated.
template <NamedChoice E>
constexpr std::string_view choice_name(E e) {
    for (const auto& [v, n] : ChoiceNames<E>::items)
        if (v == e) return n;
    return "?";
}

/// The value named `name`, or nullopt for a name the table lacks.
template <NamedChoice E>
constexpr std::optional<E> parse_choice(std::string_view name) {
    for (const auto& [v, n] : ChoiceNames<E>::items)
        if (n == name) return v;
    return std::nullopt;
}

/// Every name of the table, in its order (the schema's allowed values).
template <NamedChoice E>
std::vector<std::string> choice_names() {
    std::vector<std::string> out;
    for (const auto& [v, n] : ChoiceNames<E>::items) out.emplace_back(n);
    return out;
}

/// "a, b or c": the names for a message.
template <NamedChoice E>
std::string choice_list() {
    std::string out;
    const auto& items = ChoiceNames<E>::items;
    for (size_t i = 0; i < items.size(); ++i)
        out += std::string(i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + std::string(items[i].second);
    return out;
}

}  // namespace skew

#ifndef __CUDACC__  // fmt is not for nvcc; the CUDA sources print no choice
#include <fmt/format.h>

/// A named enum formats as its name, so messages spell it as configs and files do.
template <skew::NamedChoice E>
struct fmt::formatter<E> : fmt::formatter<std::string_view> {
    template <typename Ctx>
    auto format(E e, Ctx& ctx) const {
        return fmt::formatter<std::string_view>::format(skew::choice_name(e), ctx);
    }
};
#endif
