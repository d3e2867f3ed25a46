// Hints that propose a config value ("or set data.val_ratio: 0.05") are only given when the value
// passes the config validator: an error message never suggests a setting the schema then refuses.
#pragma once
#include <string>

namespace skew {

/// The error the config validator (load_config_text with the defaults and one `--set key=value`)
/// gives for `key` = `value`, or "" when the value is accepted. `value` is YAML scalar text.
std::string config_value_error(const std::string& key, const std::string& value);

/// "set <key>: <value>" when config_value_error accepts the value, else "" (the caller leaves
/// that alternative out of its hint).
std::string config_set_hint(const std::string& key, const std::string& value);

}  // namespace skew
