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

}  // namespace skew
