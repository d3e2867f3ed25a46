// Hint values checked by the config validator itself (see config_hint.h).
#include "engine/config_hint.h"

#include <fmt/format.h>

#include "engine/config.h"
#include "engine/error.h"

namespace skew {

std::string config_value_error(const std::string& key, const std::string& value) {
    try {
        load_config_text("{}", "hint", {key + "=" + value});
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::string config_set_hint(const std::string& key, const std::string& value) {
    return config_value_error(key, value).empty() ? "set " + key + ": " + value : "";
}

std::string config_change_hint(const Config& cfg, const std::string& key, const std::string& value,
                               const std::string& resume_run) {
    try {
        load_config_text(cfg.resolved_yaml, "hint", {key + "=" + value});
    } catch (const Error&) {
        return "";
    }
    if (resume_run.empty()) return "set " + key + ": " + value;
    return fmt::format(
        "start a new run with {}: {} (skew train {} --set {}={} --out NEW_FOLDER; --resume keeps the "
        "run's config)",
        key, value, cfg.source, key, value);
}

}  // namespace skew
