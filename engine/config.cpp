// Loading and validating the experiment config (YAML via yaml-cpp): strict keys with nearest-key
// suggestions, duplicate-key detection, typed scalars (exponent-form numbers, no wrap-around of
// negative counts, no .inf/.nan), --set overrides held to the same rules, and cross-field rules.
#include "engine/config.h"

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "engine/config_schema.h"
#include "engine/error.h"
#include "engine/param_table.h"
#include "engine/text.h"
#include "kernels/common/attention_head_dims.h"

namespace skew {

bool ModelConfig::is_moe_block(int64_t b) const {
    return std::find(moe_blocks.begin(), moe_blocks.end(), b) != moe_blocks.end();
}

const OptimizerConfig* Config::find_optimizer(const std::string& name) const {
    for (const auto& o : optimizers)
        if (o.name == name) return &o;
    for (const auto& o : defined_optimizers)
        if (o.name == name) return &o;
    return nullptr;
}

namespace {

/// One built-in optimizer: its name and what it changes from OptimizerConfig's defaults with the
/// paper's tier policy (backbone fp32 momentum + factored, experts factored, router full).
struct OptimizerPreset {
    std::string_view name;
    void (*apply)(OptimizerConfig& o);
};

/// The built-ins, in the paper's table order: the one list of their names and settings.
constexpr OptimizerPreset kOptimizerPresets[] = {
    {"skewadam", [](OptimizerConfig& o) { o.type = OptimizerType::SKEWADAM; }},
    {"adamw", [](OptimizerConfig& o) { o.type = OptimizerType::ADAMW; }},
    {"muon",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::MUON;
         o.lr = 0.02;
         o.weight_decay = 0.0;
     }},
    {"lion",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::LION;
         o.lr = 1e-4;
         o.beta2 = 0.99;
     }},
    {"adafactor", [](OptimizerConfig& o) { o.type = OptimizerType::ADAFACTOR; }},
    {"galore-paper",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::GALORE_PAPER;
         o.weight_decay = 0.0;
     }},
    {"galore",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::GALORE;
         o.eps = 1e-6;
         o.weight_decay = 0.0;
     }},
    {"skewadam-expert-momentum",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::SKEWADAM;
         o.tiers[int(Tier::EXPERTS)].momentum = MomentumKind::FP32;
     }},
    {"skewadam-factored-router",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::SKEWADAM;
         o.tiers[int(Tier::ROUTER)].second_moment = SecondMomentKind::FACTORED;
     }},
    {"uniform",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::SKEWADAM;
         for (auto& t : o.tiers) {
             t.momentum = MomentumKind::FP32;
             t.second_moment = SecondMomentKind::FACTORED;
         }
     }},
    {"muon-kj",
     [](OptimizerConfig& o) {
         o.type = OptimizerType::MUON_KJ;
         o.lr = 0.02;
         o.weight_decay = 0.0;
         o.ns_steps = 5;
         o.nesterov = true;
         o.shape_scale = true;
         o.ema_momentum = true;
         // Keller Jordan's MuonWithAuxAdam defaults for the internal Adam (docs/optimizers.md §4.1)
         o.beta2 = 0.95;
         o.eps = 1e-10;
         o.adam_lr = 3e-4;
     }},
};

}  // namespace

const std::vector<std::string>& builtin_optimizer_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const OptimizerPreset& p : kOptimizerPresets) out.emplace_back(p.name);
        return out;
    }();
    return names;
}

OptimizerConfig builtin_optimizer(const std::string& name) {
    OptimizerConfig o;
    o.name = name;
    const TierPolicy bb{MomentumKind::FP32, SecondMomentKind::FACTORED, 0.05};
    const TierPolicy ex{MomentumKind::NONE, SecondMomentKind::FACTORED, 0.05};
    const TierPolicy rt{MomentumKind::NONE, SecondMomentKind::FULL, 0.0};
    o.tiers = {bb, ex, rt, bb};  // Tier order; the shared experts default to the backbone's policy
    for (const OptimizerPreset& p : kOptimizerPresets)
        if (p.name == name) {
            p.apply(o);
            return o;
        }
    fail("unknown optimizer '{}'; built-ins are: {}", name, fmt::join(builtin_optimizer_names(), ", "));
}

namespace {

// ---- helpers: locations, suggestions

struct Loc {
    std::string where;  // "configs/tiny.yaml:12:3" or "--set model.d_model=..."
};

std::string file_loc(const std::string& source, const YAML::Mark& m) {
    if (m.is_null()) return source;
    return fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1);
}

// The message for YAML nested past yaml-cpp's limit (YAML::DeepRecursion, "bad file"): where the
// nesting went too deep and, when known, how many lists or mappings were open there.
[[noreturn]] void fail_too_deep(const std::string& where, int collections) {
    fail(
        "{}: YAML nested too deeply{}, past the depth yaml-cpp reads; a config nests a few levels "
        "(optimizers.<name>.tiers.<tier>.<key> is the deepest)",
        where, collections > 0 ? fmt::format(": {} lists or mappings inside one another here", collections) : "");
}

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string suggestion(const std::string& key, const std::vector<std::string>& valid) {
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const auto& v : valid) {
        size_t d = edit_distance(key, v);
        if (d < best_d) best_d = d, best = v;
    }
    if (!best.empty() && best_d <= std::max<size_t>(2, key.size() / 3))
        return fmt::format("; did you mean '{}'?", best);
    return fmt::format("; valid keys: {}", fmt::join(valid, ", "));
}

const char* node_kind(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Map: return "a mapping";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Null: return "nothing (null)";
        case YAML::NodeType::Scalar: return "a scalar";
        default: return "an undefined value";
    }
}

// ---- scalar parsing with the schema's rules

// A key's default, for messages (section keys; optimizer keys have no paths).
std::string key_default(const KeySpec& k) { return k.get ? format_config_value(k.get(Config{})) : "\"\""; }

// The allowed range of a number key, for messages: ">= 1 and <= 1048576", "> 0".
std::string range_text(const KeySpec& k) { return key_range_text(k); }

// An integer key; a number past the 64-bit range is out of the key's range (k), not a non-integer.
int64_t parse_int(const std::string& s, const KeySpec& k, const std::string& key, const Loc& loc) {
    std::string t = s;
    bool plain = !t.empty();
    for (size_t i = 0; i < t.size(); ++i)
        if (!(std::isdigit(static_cast<unsigned char>(t[i])) || (i == 0 && (t[i] == '-' || t[i] == '+'))))
            plain = false;
    if (plain && t.find_first_of("0123456789") == std::string::npos) plain = false;  // a lone sign is no number
    if (plain) {
        errno = 0;
        char* end = nullptr;
        long long v = std::strtoll(t.c_str(), &end, 10);
        if (errno == ERANGE) fail("{}: {}: {} is out of range: must be {}", loc.where, key, s, range_text(k));
        return v;
    }
    // exponent form of an integral value, e.g. 1e4
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (end != t.c_str() && *end == '\0' && d == std::floor(d)) {
        if (std::fabs(d) < 9.2e18) return int64_t(d);
        fail("{}: {}: {} is out of range: must be {}", loc.where, key, s, range_text(k));  // 1e30, even 1e999
    }
    fail("{}: {}: expected an integer, got '{}'", loc.where, key, s);
}

double parse_float(const std::string& s, const KeySpec& k, const std::string& key, const Loc& loc) {
    std::string low;
    for (char c : s) low += char(std::tolower(static_cast<unsigned char>(c)));
    if (low == ".inf" || low == "+.inf" || low == "-.inf" || low == ".nan" || low == "inf" || low == "nan" ||
        low == "-inf" || low == "+inf" || low == "infinity" || low == "-infinity")
        fail("{}: {}: '{}' is not allowed; a finite number is required", loc.where, key, s);
    char* end = nullptr;
    errno = 0;
    double d = std::strtod(s.c_str(), &end);
    if (s.empty() || end == s.c_str() || *end != '\0') fail("{}: {}: expected a number, got '{}'", loc.where, key, s);
    if (!std::isfinite(d) || errno == ERANGE)
        fail("{}: {}: '{}' is out of range: must be {}; a finite number is required", loc.where, key, s, range_text(k));
    return d;
}

bool parse_bool(const std::string& s, const std::string& key, const Loc& loc) {
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    fail("{}: {}: expected true or false, got '{}'", loc.where, key, s);
}

void check_range(int64_t v, const KeySpec& k, const std::string& key, const Loc& loc, const std::string& text) {
    if (!in_key_range(k, v)) fail("{}: {}: {} is out of range: must be {}", loc.where, key, text, range_text(k));
}

void check_range(double v, const KeySpec& k, const std::string& key, const Loc& loc, const std::string& text) {
    if (!in_key_range(k, v)) fail("{}: {}: {} is out of range: must be {}", loc.where, key, text, range_text(k));
}

std::string scalar_of(const YAML::Node& n, const KeySpec& k, const std::string& key, const Loc& loc) {
    if (!n.IsScalar()) fail("{}: {}: expected {}, got {}", loc.where, key, choice_name(k.type), node_kind(n));
    // A quoted or !!str-tagged scalar is a string: "64" is not the number 64.
    const bool numeric = k.type == KeyType::INT || k.type == KeyType::FLOAT || k.type == KeyType::BOOL;
    // (a !!int or !!float tag names what the key is anyway: the parser below decides)
    if (numeric && (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"))
        fail("{}: {}: expected {}, got the string \"{}\" ({})", loc.where, key, choice_name(k.type), n.Scalar(),
             n.Tag() == "!" ? "remove the quotes" : "remove the !!str tag");
    return n.Scalar();
}

// A local YAML tag (`!x`, `!x text`): yaml-cpp reads `--set data.dir=!x` as nothing (null, the
// tag dropped) and `dir: !x y` as the text "y"; a config uses no tags, so it is refused as what it
// is, with the quoting that makes it text. `text`: the YAML the node was read from (a null node's
// tag is found there, at its mark).
void refuse_local_tag(const YAML::Node& n, const std::string& key, const Loc& loc, std::string_view text) {
    std::string tag = n.Tag();
    if (n.IsNull() && !n.Mark().is_null() && size_t(n.Mark().pos) < text.size() && text[size_t(n.Mark().pos)] == '!') {
        const std::string_view rest = text.substr(size_t(n.Mark().pos));
        tag = std::string(rest.substr(0, rest.find_first_of(" \t\r\n,]}")));
    }
    if (tag.size() < 2 || tag[0] != '!') return;
    const std::string shown = escape_text(n.IsScalar() && !n.Scalar().empty() ? tag + " " + n.Scalar() : tag);
    const bool element = key.back() == ']';  // a list element: the quoted text alone
    fail(
        "{}: {}: '{}' is a YAML tag (a value starting with '!' names a type), which a config does not use; for the "
        "text, quote it: {}",
        loc.where, key, shown,
        element                             ? fmt::format("\"{}\"", shown)
        : loc.where.rfind("--set ", 0) == 0 ? fmt::format("--set '{}=\"{}\"'", key, shown)
                                            : fmt::format("{}: \"{}\"", key.substr(key.rfind('.') + 1), shown));
}

ConfigValue parse_value(const YAML::Node& n, const KeySpec& k, const std::string& key, const Loc& loc,
                        std::string_view text) {
    refuse_local_tag(n, key, loc, text);
    if (n.IsSequence())
        for (size_t i = 0; i < n.size(); ++i) refuse_local_tag(n[i], fmt::format("{}[{}]", key, i), loc, text);
    switch (k.type) {
        case KeyType::INT: {
            std::string s = scalar_of(n, k, key, loc);
            int64_t v = parse_int(s, k, key, loc);
            check_range(v, k, key, loc, s);
            return v;
        }
        case KeyType::FLOAT: {
            std::string s = scalar_of(n, k, key, loc);
            double v = parse_float(s, k, key, loc);
            check_range(v, k, key, loc, s);
            return v;
        }
        case KeyType::BOOL: return parse_bool(scalar_of(n, k, key, loc), key, loc);
        case KeyType::STRING: {
            std::string s = scalar_of(n, k, key, loc);
            if (!k.choices.empty() && std::find(k.choices.begin(), k.choices.end(), s) == k.choices.end())
                fail("{}: {}: '{}' is not one of {}{}", loc.where, key, s, fmt::join(k.choices, ", "),
                     suggestion(s, k.choices).find("did you") != std::string::npos ? suggestion(s, k.choices) : "");
            // Every free-form string key is a path (data.dir, data.tokenizer_dir, runtime.out_dir):
            // an empty one would mean the working directory, or nothing at all. train.init_from's
            // default is empty (no folder: the initializer), as a resolved config writes it.
            if (k.choices.empty() && s.empty() && k.path != "train.init_from")
                fail("{}: {}: the path is empty; give a folder, e.g. {}", loc.where, key, key_default(k));
            return s;
        }
        case KeyType::INT_LIST:
        case KeyType::STRING_LIST: {
            // a list key that also takes a word (model.moe_blocks: all)
            if (!k.choices.empty() && n.IsScalar()) {
                if (std::find(k.choices.begin(), k.choices.end(), n.Scalar()) != k.choices.end()) return n.Scalar();
                fail("{}: {}: expected {} or {}, got '{}'", loc.where, key, choice_name(k.type),
                     fmt::join(k.choices, ", "), n.Scalar());
            }
            if (!n.IsSequence())  // a bare `a,b` is one string: say how a list is written
                fail("{}: {}: expected {}, got {}{}", loc.where, key, choice_name(k.type), node_kind(n),
                     n.IsScalar() && !n.Scalar().empty() ? fmt::format("; write a list in brackets: [{}]", n.Scalar())
                                                         : "");
            std::vector<int64_t> ints;
            std::vector<std::string> strs;
            for (size_t i = 0; i < n.size(); ++i) {
                const YAML::Node e = n[i];
                std::string ekey = fmt::format("{}[{}]", key, i);
                if (!e.IsScalar()) fail("{}: {}: expected a scalar, got {}", loc.where, ekey, node_kind(e));
                if (k.type == KeyType::INT_LIST) {
                    int64_t v = parse_int(e.Scalar(), k, ekey, loc);
                    check_range(v, k, ekey, loc, e.Scalar());
                    ints.push_back(v);
                } else {
                    strs.push_back(e.Scalar());
                }
            }
            if (k.type == KeyType::INT_LIST) return ints;
            return strs;
        }
    }
    return int64_t(0);
}

// ---- duplicate keys: yaml-cpp keeps every entry of a map, so a repeated key is visible.

void check_duplicates(const YAML::Node& n, const std::string& source, const std::string& prefix) {
    if (n.IsMap()) {
        std::map<std::string, YAML::Mark> seen;
        for (auto it = n.begin(); it != n.end(); ++it) {
            std::string k = it->first.IsScalar() ? it->first.Scalar() : "?";
            std::string path = prefix.empty() ? k : prefix + "." + k;
            auto [pos, inserted] = seen.emplace(k, it->first.Mark());
            if (!inserted)
                fail("{}: duplicated key '{}' (first defined at line {})", file_loc(source, it->first.Mark()), path,
                     pos->second.line + 1);
            check_duplicates(it->second, source, path);
        }
    } else if (n.IsSequence()) {
        for (size_t i = 0; i < n.size(); ++i) check_duplicates(n[i], source, fmt::format("{}[{}]", prefix, i));
    }
}

const KeySpec* find_spec(const std::vector<KeySpec>& specs, const std::string& path) {
    for (const auto& k : specs)
        if (k.path == path) return &k;
    return nullptr;
}

// ---- the loader state: values applied in order (file, then overrides), each with its location

struct Loader {
    Config cfg;
    std::string source;
    std::string applied_yaml;                        // the YAML being applied: the file's, then each --set value's
    std::map<std::string, std::string> where;        // key path -> location of the value that set it
    std::map<std::string, OptimizerConfig> defined;  // optimizers section, by name
    std::vector<std::string> defined_order;
    std::map<std::string, int> overridden;  // key path -> order of the last command-line override that set it
    int overrides_applied = 0;

    std::string loc_of(const std::string& path) const {
        auto it = where.find(path);
        return it == where.end() ? source + " (default)" : it->second;
    }

    // `path` as written: a key, or a former name of one (section_key_aliases), which sets that key.
    void apply_section_key(const std::string& path, const YAML::Node& value, const Loc& loc) {
        const std::string key = canonical_section_key(path);
        check_spelling(path, key, loc);
        const KeySpec* k = find_spec(section_key_specs(), key);
        k->set(cfg, parse_value(value, *k, path, loc, applied_yaml));
        where[key] = loc.where;
    }

    // A renamed key given under both its names in one place (the file, or the command line) is an
    // error naming both; across the two the command line overrides the file, as for any key.
    std::map<std::string, std::map<std::string, std::string>> spellings;  // "file:"/"cli:" + key -> name -> where
    void check_spelling(const std::string& written, const std::string& key, const Loc& loc) {
        const auto& aliases = section_key_aliases();
        if (std::none_of(aliases.begin(), aliases.end(), [&](const auto& a) { return a.second == key; })) return;
        auto& seen = spellings[(loc.where.rfind("--", 0) == 0 ? "cli:" : "file:") + key];
        for (const auto& [other, at] : seen)
            if (other != written)
                fail("{}: {}: {} is given too (at {}); {} is the former name of {}: give only {}", loc.where, written,
                     other, at, written == key ? other : written, key, key);
        seen[written] = loc.where;
    }

    OptimizerConfig& optimizer_entry(const std::string& name, const std::string& type_hint, const Loc& loc) {
        auto it = defined.find(name);
        if (it != defined.end()) return it->second;
        OptimizerConfig o;
        const auto& names = builtin_optimizer_names();
        if (std::find(names.begin(), names.end(), name) != names.end()) {
            o = builtin_optimizer(name);
        } else if (!type_hint.empty()) {
            o = builtin_optimizer(type_hint);
            o.name = name;
        } else {
            fail(
                "{}: optimizers.{}: '{}' is not a built-in optimizer, so it needs a `type:` (one of skewadam, adamw, "
                "lion, muon, muon-kj, adafactor, galore, galore-paper){}",
                loc.where, name, name,
                suggestion(name, names).find("did you") != std::string::npos ? suggestion(name, names) : "");
        }
        defined_order.push_back(name);
        return defined.emplace(name, o).first->second;
    }

    void apply_optimizer_key(const std::string& name, const std::string& rel, const YAML::Node& value, const Loc& loc,
                             OptimizerConfig& o) {
        const KeySpec* k = find_spec(optimizer_key_specs(), rel);
        std::string path = "optimizers." + name + "." + rel;
        k->set_opt(o, parse_value(value, *k, path, loc, applied_yaml));
        where[path] = loc.where;
    }

    // Walk one optimizers.<name> mapping (nested tiers.* included) and collect leaf keys.
    void walk_optimizer(const std::string& name, const YAML::Node& entry) {
        Loc loc{file_loc(source, entry.Mark())};
        if (!entry.IsMap())
            fail("{}: optimizers.{}: expected a mapping of optimizer settings, got {}", loc.where, name,
                 node_kind(entry));
        std::string type_hint;
        if (entry["type"] && entry["type"].IsScalar()) {
            const KeySpec* k = find_spec(optimizer_key_specs(), "type");
            Loc tl{file_loc(source, entry["type"].Mark())};
            type_hint =
                std::get<std::string>(parse_value(entry["type"], *k, "optimizers." + name + ".type", tl, applied_yaml));
        }
        OptimizerConfig& o = optimizer_entry(name, type_hint, loc);
        std::vector<std::pair<std::string, YAML::Node>> leaves;
        collect_leaves(entry, "", leaves, "optimizers." + name, optimizer_rel_keys());
        for (auto& [rel, node] : leaves) apply_optimizer_key(name, rel, node, Loc{file_loc(source, node.Mark())}, o);
        // An empty `tiers: {}` (or `tiers: {router: {}}`) sets no key for check_optimizer_keys to see.
        if (entry["tiers"] && o.type != OptimizerType::SKEWADAM &&
            std::none_of(leaves.begin(), leaves.end(), [](const auto& l) { return l.first.rfind("tiers.", 0) == 0; }))
            fail(
                "{}: optimizers.{}.tiers: tiers is a SkewAdam setting, but optimizer '{}' has type {}, which ignores "
                "it; "
                "remove the key or set `type: skewadam`",
                file_loc(source, entry["tiers"].Mark()), name, name, o.type);
    }

    static std::vector<std::string> optimizer_rel_keys() {
        std::vector<std::string> v;
        for (const auto& k : optimizer_key_specs()) v.push_back(k.path);
        return v;
    }

    // Flatten a mapping into (relative path, leaf node); nested maps are allowed only where some
    // valid key has that prefix (tiers.backbone.momentum). Unknown keys fail with a suggestion.
    void collect_leaves(const YAML::Node& map, const std::string& prefix,
                        std::vector<std::pair<std::string, YAML::Node>>& out, const std::string& display_prefix,
                        const std::vector<std::string>& valid) {
        for (auto it = map.begin(); it != map.end(); ++it) {
            std::string k = it->first.Scalar();
            std::string rel = prefix.empty() ? k : prefix + "." + k;
            bool leaf = std::find(valid.begin(), valid.end(), rel) != valid.end();
            bool inner = false;
            std::vector<std::string> here;  // valid names at this level, for the suggestion
            for (const auto& v : valid) {
                if (v.rfind(rel + ".", 0) == 0) inner = true;
                if (prefix.empty() || v.rfind(prefix + ".", 0) == 0) {
                    std::string rest = prefix.empty() ? v : v.substr(prefix.size() + 1);
                    std::string first = rest.substr(0, rest.find('.'));
                    if (std::find(here.begin(), here.end(), first) == here.end()) here.push_back(first);
                }
            }
            if (leaf) {
                out.emplace_back(rel, it->second);
            } else if (inner) {
                if (!it->second.IsMap())
                    fail("{}: {}.{}: expected a mapping, got {}", file_loc(source, it->second.Mark()), display_prefix,
                         rel, node_kind(it->second));
                collect_leaves(it->second, rel, out, display_prefix, valid);
            } else {
                fail("{}: unknown key '{}.{}'{}", file_loc(source, it->first.Mark()), display_prefix, rel,
                     suggestion(k, here));
            }
        }
    }

    void load_tree(const YAML::Node& root) {
        if (root.IsNull()) return;  // an empty file: all defaults
        if (!root.IsMap())
            fail(
                "{}: the config must be a mapping of sections (model, optimizers, data, train, runtime, parallel), got "
                "{}",
                file_loc(source, root.Mark()), node_kind(root));
        check_duplicates(root, source, "");
        static const std::vector<std::string> sections = {"model", "optimizers", "data",
                                                          "train", "runtime",    "parallel"};
        for (auto it = root.begin(); it != root.end(); ++it) {
            std::string sec = it->first.Scalar();
            Loc loc{file_loc(source, it->first.Mark())};
            if (std::find(sections.begin(), sections.end(), sec) == sections.end())
                fail("{}: unknown section '{}'{}", loc.where, sec, suggestion(sec, sections));
            const YAML::Node body = it->second;
            if (body.IsNull()) continue;
            if (!body.IsMap())
                fail("{}: {}: expected a mapping, got {}", file_loc(source, body.Mark()), sec, node_kind(body));
            if (sec == "optimizers") {
                for (auto o = body.begin(); o != body.end(); ++o) walk_optimizer(o->first.Scalar(), o->second);
                continue;
            }
            std::vector<std::string> valid;
            for (const auto& k : section_key_specs())
                if (k.path.rfind(sec + ".", 0) == 0) valid.push_back(k.path.substr(sec.size() + 1));
            for (const auto& [alias, key] : section_key_aliases())
                if (alias.rfind(sec + ".", 0) == 0) valid.push_back(alias.substr(sec.size() + 1));
            std::vector<std::pair<std::string, YAML::Node>> leaves;
            collect_leaves(body, "", leaves, sec, valid);
            for (auto& [rel, node] : leaves)
                apply_section_key(sec + "." + rel, node, Loc{file_loc(source, node.Mark())});
        }
    }

    // `flag` names the option in errors: "--set key=value" by default, or the flag that stands for
    // the override (`--optimizers a,b` for train.optimizers=[a,b]).
    void apply_override(const std::string& text, const std::string& flag = "") {
        auto eq = text.find('=');
        if (eq == std::string::npos || eq == 0) fail("--set {}: expected key=value, e.g. --set train.steps=100", text);
        std::string path = text.substr(0, eq);
        std::string value_text = text.substr(eq + 1);
        Loc loc{flag.empty() ? "--set " + text : flag};
        applied_yaml = value_text;
        // `--set key=` (a shell variable that expanded to nothing): no value, whatever the key's type
        if (value_text.empty() && flag.empty()) {
            if (const KeySpec* k = find_spec(section_key_specs(), canonical_section_key(path)))
                fail("--set {}=: no value after '='; give one, e.g. --set {}={}", path, path, key_default(*k));
            if (path.rfind("optimizers.", 0) == 0) fail("--set {}=: no value after '='; give one after it", path);
        }
        overridden[canonical_section_key(path)] = ++overrides_applied;
        YAML::Node value;
        try {
            value = YAML::Load(value_text.empty() ? "\"\"" : value_text);
        } catch (const YAML::DeepRecursion&) {
            fail_too_deep("--set " + path, 0);
        } catch (const YAML::Exception& e) {
            fail("{}: cannot parse the value: {}", loc.where, e.msg);
        }
        if (path.rfind("optimizers.", 0) == 0) {
            std::string rest = path.substr(11);
            auto dot = rest.find('.');
            if (dot == std::string::npos) fail("{}: expected optimizers.<name>.<key>", loc.where);
            std::string name = rest.substr(0, dot), rel = rest.substr(dot + 1);
            std::vector<std::string> valid = optimizer_rel_keys();
            if (std::find(valid.begin(), valid.end(), rel) == valid.end())
                fail("{}: unknown key '{}'{}", loc.where, path, suggestion(rel, valid));
            std::string type_hint;
            if (rel == "type" && value.IsScalar()) type_hint = value.Scalar();
            OptimizerConfig& o = optimizer_entry(name, type_hint, loc);
            apply_optimizer_key(name, rel, value, loc, o);
            return;
        }
        std::vector<std::string> valid;
        for (const auto& k : section_key_specs()) valid.push_back(k.path);
        if (!find_spec(section_key_specs(), canonical_section_key(path)))
            fail("{}: unknown key '{}'{}", loc.where, path, suggestion(path, valid));
        apply_section_key(path, value, loc);
    }

    // A cross-field rule on `key` that also reads `others`: the error names the key and, when the
    // last value to change any of them came from the command line, that option (not the file line
    // of a key the option did not touch), adding where the key itself was set.
    void rule(bool ok, const std::string& key, const std::string& message,
              std::initializer_list<const char*> others = {}) const {
        if (ok) return;
        std::string blamed = key;
        int latest = overridden.count(key) ? overridden.at(key) : 0;
        for (const char* o : others)
            if (auto it = overridden.find(o); it != overridden.end() && it->second > latest) {
                latest = it->second;
                blamed = o;
            }
        if (blamed == key) fail("{}: {}: {}", loc_of(key), key, message);
        fail("{}: {}: {} ({} is set at {})", loc_of(blamed), key, message, key, loc_of(key));
    }

    void check_rules() {
        if (cfg.model.moe_blocks_all) {  // `moe_blocks: all`, against the final n_blocks
            cfg.model.moe_blocks.clear();
            for (int64_t b = 0; b < cfg.model.n_blocks; ++b) cfg.model.moe_blocks.push_back(b);
        }
        const ModelConfig& m = cfg.model;
        if (m.head_dim_key == 0)  // head_dim = d_model / n_heads
            rule(m.d_model % m.n_heads == 0, "model.n_heads",
                 fmt::format("d_model ({}) must be divisible by n_heads ({})", m.d_model, m.n_heads),
                 {"model.d_model"});
        else  // the CPU kernels take any width; a config that may run on a GPU needs one the CUDA kernels take
            rule(cfg.runtime.backend == BackendChoice::CPU || attention_head_dim_supported(m.head_dim_key),
                 "model.head_dim",
                 fmt::format("head_dim ({}) must be 16, 32, 64 or 128, the head widths the CUDA attention kernels "
                             "take (any width runs with runtime.backend: cpu; 0: d_model / n_heads)",
                             m.head_dim_key),
                 {"runtime.backend"});
        rule(
            m.n_shared_experts == 0 || !m.moe_blocks.empty(), "model.n_shared_experts",
            fmt::format("{} shared experts sit in the MoE blocks, but model.moe_blocks lists none", m.n_shared_experts),
            {"model.moe_blocks"});
        rule(m.shared_expert_gate == SharedExpertGate::NONE || m.n_shared_experts > 0, "model.shared_expert_gate",
             fmt::format("{} gates the shared experts' output, but model.n_shared_experts is 0", m.shared_expert_gate),
             {"model.n_shared_experts"});
        rule(m.n_heads % m.n_kv_heads == 0, "model.n_kv_heads",
             fmt::format("n_heads ({}) must be divisible by n_kv_heads ({})", m.n_heads, m.n_kv_heads),
             {"model.n_heads"});
        rule(m.n_kv_heads <= m.n_heads, "model.n_kv_heads",
             fmt::format("n_kv_heads ({}) must not exceed n_heads ({})", m.n_kv_heads, m.n_heads), {"model.n_heads"});
        if (m.head_dim_key == 0 && m.d_model % m.n_heads == 0)
            rule(m.positions != Positions::ROPE || m.head_dim() % 2 == 0, "model.positions",
                 fmt::format(
                     "rope pairs lane i with lane i + head_dim/2: head_dim (d_model / n_heads = {}) must be even",
                     m.head_dim()),
                 {"model.n_heads", "model.d_model"});
        else if (m.head_dim_key > 0)
            rule(m.positions != Positions::ROPE || m.head_dim() % 2 == 0, "model.head_dim",
                 fmt::format("rope pairs lane i with lane i + head_dim/2: head_dim ({}) must be even", m.head_dim()),
                 {"model.positions"});
        rule(m.top_k <= m.n_experts, "model.top_k",
             fmt::format("top_k ({}) must not exceed n_experts ({})", m.top_k, m.n_experts), {"model.n_experts"});
        rule(m.padded_vocab_size >= m.vocab_size, "model.padded_vocab_size",
             fmt::format("padded_vocab_size ({}) must be >= vocab_size ({})", m.padded_vocab_size, m.vocab_size),
             {"model.vocab_size"});
        std::set<int64_t> seen;
        for (int64_t b : m.moe_blocks) {
            rule(b < m.n_blocks, "model.moe_blocks",
                 fmt::format("block index {} is out of range: the model has n_blocks = {} (indices 0..{})", b,
                             m.n_blocks, m.n_blocks - 1),
                 {"model.n_blocks"});
            rule(seen.insert(b).second, "model.moe_blocks", fmt::format("block index {} is listed twice", b));
        }
        const TrainConfig& t = cfg.train;
        rule(t.seq_len <= m.max_seq_len, "train.seq_len",
             fmt::format("seq_len ({}) must not exceed model.max_seq_len ({})", t.seq_len, m.max_seq_len),
             {"model.max_seq_len"});
        rule(t.microbatch == 0 || t.batch_size % t.microbatch == 0, "train.microbatch",
             fmt::format("microbatch ({}) must divide batch_size ({})", t.microbatch, t.batch_size),
             {"train.batch_size"});
        rule(!t.optimizers.empty(), "train.optimizers", "list at least one optimizer");
        std::set<std::string> names;
        for (const auto& n : t.optimizers)
            rule(names.insert(n).second, "train.optimizers", fmt::format("'{}' is listed twice", n));
        rule(m.n_experts % cfg.parallel.expert == 0, "parallel.expert",
             fmt::format("expert parallelism ({}) must divide model.n_experts ({})", cfg.parallel.expert, m.n_experts));
        rule(cfg.parallel.expert == 1 || t.recompute == Recompute::BLOCK, "parallel.expert",
             fmt::format("expert parallelism ({}) runs with train.recompute: block only (the exchange of a block's "
                         "rows is planned again by its recompute); train.recompute is {}",
                         cfg.parallel.expert, t.recompute));
    }

    // tiers.* are read by SkewAdam alone (optim/optimizer.cpp, param_policy): under any other type
    // they would be silently ignored, so setting one there is an error naming the optimizer and key.
    // One exception keeps run folders resumable: a resolved config (a run's config.yaml, `skew
    // config` output) lists every key of every optimizer, tiers.* included at the type's defaults.
    void check_optimizer_keys() const {
        for (const auto& name : defined_order) {
            const OptimizerConfig& o = defined.at(name);
            if (o.type == OptimizerType::SKEWADAM) continue;
            const std::string entry = "optimizers." + name + ".", prefix = entry + "tiers.";
            // (a config.yaml written before the shared_experts tier lists every other key)
            const std::string shared_tier = fmt::format("{}{}.", prefix, Tier::SHARED_EXPERTS);
            size_t keys_set = 0, keys = 0;
            for (auto it = where.lower_bound(entry); it != where.end() && it->first.rfind(entry, 0) == 0; ++it)
                if (it->first.rfind(shared_tier, 0) != 0) keys_set++;
            for (const KeySpec& k : optimizer_key_specs())
                if (("optimizers." + name + "." + k.path).rfind(shared_tier, 0) != 0) keys++;
            const bool resolved = keys_set == keys;
            const OptimizerConfig defaults = builtin_optimizer(std::string(choice_name(o.type)));
            for (auto it = where.lower_bound(prefix); it != where.end() && it->first.rfind(prefix, 0) == 0; ++it) {
                const KeySpec* k = find_spec(optimizer_key_specs(), it->first.substr(entry.size()));
                if (resolved && k->get_opt(o) == k->get_opt(defaults)) continue;
                fail(
                    "{}: {}: tiers.* is a SkewAdam setting, but optimizer '{}' has type {}, which ignores it; "
                    "remove the key or set `type: skewadam`",
                    it->second, it->first, name, o.type);
            }
        }
    }

    void resolve_optimizers() {
        for (const auto& name : defined_order) cfg.defined_optimizers.push_back(defined.at(name));
        const auto& builtins = builtin_optimizer_names();
        for (const auto& name : cfg.train.optimizers) {
            auto it = defined.find(name);
            if (it != defined.end()) {
                cfg.optimizers.push_back(it->second);
            } else if (std::find(builtins.begin(), builtins.end(), name) != builtins.end()) {
                cfg.optimizers.push_back(builtin_optimizer(name));
            } else {
                std::vector<std::string> all = builtins;
                all.insert(all.end(), defined_order.begin(), defined_order.end());
                fail(
                    "{}: train.optimizers: unknown optimizer '{}': not a built-in and not defined under "
                    "`optimizers:`{}",
                    loc_of("train.optimizers"), name, suggestion(name, all));
            }
            const OptimizerType type = cfg.optimizers.back().type;
            const bool galore = type == OptimizerType::GALORE || type == OptimizerType::GALORE_PAPER;
            rule(cfg.train.expert_grads != ExpertGrads::DEFERRED || !galore, "train.expert_grads",
                 fmt::format("deferred expert gradients are not supported by optimizer '{}' (type {}): its "
                             "projected step is not split into one expert matrix at a time; use "
                             "train.expert_grads: stored",
                             name, type),
                 {"train.optimizers"});
        }
    }

    std::string resolved_yaml() const {
        YAML::Emitter e;
        e << YAML::BeginMap;
        std::string open;
        for (const auto& k : section_key_specs()) {
            std::string sec = k.path.substr(0, k.path.find('.'));
            if (sec != open) {
                if (!open.empty()) e << YAML::EndMap;
                e << YAML::Key << sec << YAML::Value << YAML::BeginMap;
                open = sec;
            }
            e << YAML::Key << k.path.substr(sec.size() + 1) << YAML::Value;
            emit_value(e, k.get(cfg));
        }
        if (!open.empty()) e << YAML::EndMap;
        e << YAML::Key << "optimizers" << YAML::Value << YAML::BeginMap;
        for (const auto& o : cfg.optimizers) {
            e << YAML::Key << o.name << YAML::Value << YAML::BeginMap;
            for (const auto& k : optimizer_key_specs()) {
                e << YAML::Key << k.path << YAML::Value;
                emit_value(e, k.get_opt(o));
            }
            e << YAML::EndMap;
        }
        e << YAML::EndMap << YAML::EndMap;
        return e.c_str();
    }

    static void emit_value(YAML::Emitter& e, const ConfigValue& v) {
        if (auto* i = std::get_if<int64_t>(&v)) e << *i;
        else if (auto* d = std::get_if<double>(&v)) e << fmt::format("{}", *d);
        else if (auto* b = std::get_if<bool>(&v)) e << *b;
        else if (auto* s = std::get_if<std::string>(&v)) e << *s;
        else if (auto* il = std::get_if<std::vector<int64_t>>(&v)) {
            e << YAML::Flow << YAML::BeginSeq;
            for (auto x : *il) e << x;
            e << YAML::EndSeq;
        } else if (auto* sl = std::get_if<std::vector<std::string>>(&v)) {
            e << YAML::Flow << YAML::BeginSeq;
            for (auto& x : *sl) e << x;
            e << YAML::EndSeq;
        }
    }
};

}  // namespace

namespace {

// The 1-based line of the `---` that opens the document whose root yaml-cpp marks at mark_line
// (0-based; for an empty document the mark lies after the marker).
int64_t document_marker_line(const std::string& text, int mark_line) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    for (int64_t i = std::min<int64_t>(mark_line, int64_t(lines.size()) - 1); i >= 0; --i) {
        const std::string& l = lines[size_t(i)];
        if (l.rfind("---", 0) == 0 && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r')) return i + 1;
    }
    return int64_t(mark_line) + 1;
}

// The start marks of the YAML text's first documents (at most 3), through yaml-cpp's event parser.
// Not YAML::LoadAll: on some invalid text (a stray ',' at the top level, found by fuzzing) it
// returns the same empty document forever and never ends (docs/sources.md, yaml-cpp empty documents); here a document
// that starts where the previous one did is a syntax error at that mark.
// It also follows how deeply lists and mappings nest, to name the line where a text nested past
// yaml-cpp's depth limit (YAML::DeepRecursion, whose own message is "bad file") goes too deep.
struct DocumentStarts : YAML::EventHandler {
    std::vector<YAML::Mark> starts;
    std::optional<YAML::Mark> first_alias;
    int open = 0;           // lists and mappings open now
    int deepest = 0;        // the most open at once
    YAML::Mark deepest_at;  // where the innermost of those began
    void opened(const YAML::Mark& m) {
        if (++open > deepest) deepest = open, deepest_at = m;
    }
    void OnDocumentStart(const YAML::Mark& m) override { starts.push_back(m); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark& m, YAML::anchor_t) override {
        if (!first_alias) first_alias = m;
    }
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
        opened(m);
    }
    void OnSequenceEnd() override { --open; }
    void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
        opened(m);
    }
    void OnMapEnd() override { --open; }
};

std::vector<YAML::Mark> yaml_document_starts(const std::string& text, const std::string& source) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts d;
    while (d.starts.size() < 3) {
        try {
            if (!parser.HandleNextDocument(d)) break;
        } catch (const YAML::DeepRecursion&) {
            fail_too_deep(file_loc(source, d.deepest_at), d.deepest);
        }
        // yaml-cpp registers an anchor before its children, so `a: &x [*x]` loads as a cycle, and
        // nested aliases expand exponentially: a config is small enough to write every value out.
        if (d.first_alias)
            fail("{}: YAML alias (*name) in a config: aliases and anchors are not supported; write the value out",
                 file_loc(source, *d.first_alias));
        const size_t n = d.starts.size();
        if (n >= 2 && d.starts[n - 1].pos == d.starts[n - 2].pos)
            fail(
                "{}: YAML syntax error: unexpected text the parser cannot read (a stray ',', '[' or '{{' outside a "
                "list or mapping?)",
                file_loc(source, d.starts[n - 1]));
    }
    return d.starts;
}

Config load_config_text_unescaped(const std::string& yaml_text, const std::string& source,
                                  const std::vector<std::string>& overrides,
                                  const std::vector<FlagOverride>& flag_overrides) {
    Loader L;
    L.source = source;
    L.cfg.source = source;
    std::vector<YAML::Node> docs;
    try {
        const std::vector<YAML::Mark> starts = yaml_document_starts(yaml_text, source);
        // yaml-cpp's Load would take the first document and drop the rest without a word.
        if (starts.size() > 1)
            fail(
                "{}:{}: a second YAML document (`---`) begins here; a config is one document: remove the `---` "
                "line or split the file",
                source, document_marker_line(yaml_text, starts[1].line));
        if (!starts.empty()) docs.push_back(YAML::Load(yaml_text));
    } catch (const YAML::ParserException& e) {
        fail("{}: YAML syntax error: {}", file_loc(source, e.mark), e.msg);
    } catch (const YAML::Exception& e) {
        fail("{}: cannot read YAML: {}", source, e.what());
    }
    // An empty or comment-only file (or /dev/null) would silently mean the paper's 6.78B defaults.
    if (docs.empty() || docs[0].IsNull())
        fail(
            "{}: has no settings (the file is empty or holds only comments); a config needs at least one of the "
            "sections model, optimizers, data, train, runtime, parallel (configs/tiny.yaml is a small example)",
            source);
    // Section order matters for optimizer entries only; apply the train section's list first is
    // not needed since optimizers resolve after all values are in.
    L.applied_yaml = yaml_text;
    L.load_tree(docs[0]);
    for (const auto& o : overrides) L.apply_override(o);
    for (const auto& o : flag_overrides) L.apply_override(o.text, o.flag);
    L.check_rules();
    L.check_optimizer_keys();
    L.resolve_optimizers();
    L.cfg.resolved_yaml = L.resolved_yaml();
    return L.cfg;
}

constexpr int64_t kMaxConfigBytes = int64_t(4) << 20;

const char* file_kind(const std::filesystem::file_status& st) {
    namespace fs = std::filesystem;
    if (fs::is_character_file(st)) return "a character device";
    if (fs::is_block_file(st)) return "a block device";
    if (fs::is_fifo(st)) return "a pipe";
    if (fs::is_socket(st)) return "a socket";
    return "a special file";
}

}  // namespace

Config load_config_text(const std::string& yaml_text, const std::string& source,
                        const std::vector<std::string>& overrides, const std::vector<FlagOverride>& flag_overrides) {
    try {
        return load_config_text_unescaped(yaml_text, source, overrides, flag_overrides);
    } catch (const Error& e) {
        // Keys, values and file names are the user's bytes: never echo control or broken UTF-8 bytes.
        throw Error(escape_text(e.what()));
    }
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const std::vector<FlagOverride>& flag_overrides) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail("{}: is a directory, not a config file", escape_text(path));
    const fs::file_status st = fs::status(path, ec);
    const bool regular = !ec && fs::is_regular_file(st);
    if (regular) {
        const auto size = fs::file_size(path, ec);
        if (!ec && int64_t(size) > kMaxConfigBytes)
            fail("{}: {} bytes; a config file is at most 4 MiB (is this the right file?)", escape_text(path), size);
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open the config file ({})", escape_text(path), std::strerror(errno));
    // Read in blocks with a cap: a device or pipe (/dev/zero, /dev/urandom) would never end.
    std::string text;
    std::vector<char> block(64 << 10);
    while (in) {
        in.read(block.data(), std::streamsize(block.size()));
        const size_t got = size_t(in.gcount());
        const void* nul = std::memchr(block.data(), 0, got);
        if (nul)
            fail("{}: not a text file ({}byte {} is NUL); a config is YAML text", escape_text(path),
                 regular ? "" : fmt::format("{}: ", file_kind(st)),
                 text.size() + size_t(static_cast<const char*>(nul) - block.data()));
        text.append(block.data(), got);
        if (int64_t(text.size()) > kMaxConfigBytes)
            fail("{}: more than {} bytes read{}; a config file is at most 4 MiB", escape_text(path), kMaxConfigBytes,
                 regular ? "" : fmt::format(" from {}", file_kind(st)));
    }
    if (in.bad()) fail("{}: cannot read the config file ({})", escape_text(path), std::strerror(errno));
    return load_config_text(text, path, overrides, flag_overrides);
}

}  // namespace skew
