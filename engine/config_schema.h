// The config schema: every key of the experiment config with its type, range, allowed values,
// meaning and how it is stored. One table serves validation, defaults, the resolved-config dump
// and the config reference, docs/config-reference.md (`skew config --reference`).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "engine/choice_names.h"
#include "engine/config.h"

namespace skew {

enum class KeyType : uint8_t { INT, FLOAT, BOOL, STRING, INT_LIST, STRING_LIST };
/// A key type as messages and the config reference spell it.
template <>
struct ChoiceNames<KeyType> {
    static constexpr std::array<std::pair<KeyType, std::string_view>, 6> items{
        {{KeyType::INT, "integer"},
         {KeyType::FLOAT, "number"},
         {KeyType::BOOL, "bool"},
         {KeyType::STRING, "string"},
         {KeyType::INT_LIST, "list of integers"},
         {KeyType::STRING_LIST, "list of strings"}}};
};

using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<std::string>>;

/// One key. For section keys `path` is "section.key"; for optimizer keys it is relative to
/// `optimizers.<name>.` (e.g. "lr", "tiers.router.momentum").
struct KeySpec {
    std::string path;
    KeyType type;
    double min = -1e300;  // bounds for numbers (and for list elements), inclusive unless marked
    double max = 1e300;
    bool min_exclusive = false;        // the interval is (min, ... rather than [min, ...
    std::vector<std::string> choices;  // allowed strings (empty: any)
    std::string doc;
    std::function<void(Config&, const ConfigValue&)> set;  // section keys
    std::function<ConfigValue(const Config&)> get;
    std::function<void(OptimizerConfig&, const ConfigValue&)> set_opt;  // optimizer keys
    std::function<ConfigValue(const OptimizerConfig&)> get_opt;
    bool max_exclusive = false;  // ..., max) rather than ..., max]: e.g. a decay beta in [0, 1)
};

/// Whether a number lies in the key's interval (its ends open or closed as the spec says).
bool in_key_range(const KeySpec& k, double v);
/// The same for an integer, compared exactly (a double holds integers only up to 2^53).
bool in_key_range(const KeySpec& k, int64_t v);
/// The interval as text for messages and the reference: ">= 0 and < 1", "> 0".
std::string key_range_text(const KeySpec& k);

/// Keys of the sections model, data, train, runtime.
const std::vector<KeySpec>& section_key_specs();
/// Former names of section keys, (alias, key): the loader reads an alias as its key (a config or a
/// run folder's config.yaml written before the rename); giving both is an error naming both.
const std::vector<std::pair<std::string, std::string>>& section_key_aliases();
/// The key `path` stands for: the key of an alias (model.layernorm_eps -> model.norm_eps), else `path`.
std::string canonical_section_key(const std::string& path);
/// Keys of one `optimizers.<name>` entry.
const std::vector<KeySpec>& optimizer_key_specs();

/// A value as YAML-ish text for messages and the reference ("3e-04", "[skewadam, adamw]").
std::string format_config_value(const ConfigValue& v);

/// The resolved values of one section ("model"): key (without the section) -> format_config_value
/// text, in schema order. What a checkpoint records of the model that trained it (checkpoint/checkpoint.h).
std::vector<std::pair<std::string, std::string>> config_section_values(const Config& cfg, const std::string& section);

/// The config reference of docs/config-reference.md: a Markdown table of every key (type, default, meaning).
std::string config_reference_markdown();

}  // namespace skew
