// JSON read by the engine (safetensors headers, trainer_state.json, manifest.json, metrics, the
// tokenizer's vocabulary, JSONL documents): parsed with nlohmann::json, but an object that names
// one key twice is refused (nlohmann keeps the last silently; RFC 8259 leaves it undefined).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace skew {

/// Parse `text` as one JSON value. Throws skew::Error "<source>: ..." on invalid JSON, or on an
/// object holding a key twice ("duplicate key 'x' in <path>", the path of the object as
/// "shards[2]" or "the top-level object").
nlohmann::json json_parse_strict(std::string_view text, const std::string& source);

/// The same, without exceptions: returns false and sets `error` (no source prefix) on invalid
/// JSON or a duplicate key; `out` is then unspecified.
bool json_try_parse_strict(std::string_view text, nlohmann::json& out, std::string& error);

/// The string under `key` of the object `j`, or `fallback` where `j` has no such key. Throws
/// skew::Error "<source>: '<key>' must be a string, got <value>" where the key holds another type,
/// and "<source>: not a JSON object" where `j` is not an object (nlohmann's value() would throw its
/// own type_error, which names neither the file nor the key).
std::string json_string_or(const nlohmann::json& j, const char* key, const std::string& fallback,
                           const std::string& source);

/// The integer under `key` of the object `j`, or `fallback` where `j` has no such key; the same
/// errors ("... must be an integer, got <value>"; a value beyond int64 is refused, not wrapped).
int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source);

}  // namespace skew
