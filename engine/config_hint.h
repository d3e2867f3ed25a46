// Hints that propose a config value ("or set data.val_ratio: 0.05") are only given when the value
// passes the config validator: an error message never suggests a setting the schema then refuses.
#pragma once
#include <string>

namespace skew {

struct Config;

/// The error the config validator (load_config_text with the defaults and one `--set key=value`)
/// gives for `key` = `value`, or "" when the value is accepted. `value` is YAML scalar text.
std::string config_value_error(const std::string& key, const std::string& value);

/// "set <key>: <value>" when config_value_error accepts the value, else "" (the caller leaves
/// that alternative out of its hint).
std::string config_set_hint(const std::string& key, const std::string& value);

/// A hint's proposal to change `key` of the run's config `cfg` to `value`, as the command at hand
/// can take it: "set <key>: <value>" for a new run (`skew train CONFIG`, its file or --set); under
/// `skew train --resume RUN` (resume_run not empty), which keeps the run's config, "start a new
/// run with <key>: <value> (skew train SOURCE --set <key>=<value> --out NEW_FOLDER)", SOURCE the
/// file cfg was read from (cfg.source: the run folder's config under --resume).
/// "" when the validator refuses cfg with that value (the caller leaves the alternative out).
std::string config_change_hint(const Config& cfg, const std::string& key, const std::string& value,
                               const std::string& resume_run);

}  // namespace skew
