// Hint values checked by the config validator itself (see config_hint.h).
#include "engine/config_hint.h"

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

}  // namespace skew
