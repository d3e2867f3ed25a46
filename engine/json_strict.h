// JSON read by the engine (safetensors headers, trainer_state.json, manifest.json, metrics, the
// tokenizer's vocabulary, JSONL documents): parsed with nlohmann::json, but an object that names
// one key twice is refused (nlohmann keeps the last silently; RFC 8259 leaves it undefined), and so
// is nesting deeper than 128 levels (nlohmann's copy, == and dump recurse).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace skew {

/// Parse `text` as one JSON value. Throws skew::Error "<source>: ..." on invalid JSON, or on an
/// object holding a key twice ("duplicate key 'x' in <path>", the path of the object as
/// "shards[2]" or "the top-level object"), or on arrays/objects nested more than 128 deep.
nlohmann::json json_parse_strict(std::string_view text, const std::string& source);

/// The same, without exceptions: returns false and sets `error` (no source prefix) on invalid
/// JSON or a duplicate key; `out` is then unspecified.
bool json_try_parse_strict(std::string_view text, nlohmann::json& out, std::string& error);

/// `j` as indented JSON text for a file or the terminal. A string that is not valid UTF-8 (a path
/// of Latin-1 bytes, a cut multi-byte character) is written with U+FFFD in place of its bad bytes;
/// nlohmann's plain dump() would throw its type_error 316 after all the work that made `j`.
std::string json_text(const nlohmann::json& j, int indent = 2);

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
