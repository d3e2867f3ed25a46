// Strict JSON parsing: nlohmann's parser with a callback that tracks the keys of every open
// object and stops at the first key seen twice or the first container nested too deep.
#include "engine/json_strict.h"

#include <cstdint>
#include <set>
#include <vector>

#include "engine/error.h"

namespace skew {
namespace {

// A refusal the callback raises (a key named twice, nesting too deep), with its message.
struct Refusal {
    std::string message;
};

constexpr int MAX_DEPTH = 128;

// One open container: its keys so far (objects), the element count (arrays), its path.
struct Open {
    bool is_object = false;
    std::set<std::string> keys;
    int64_t elements = 0;
    std::string path;
    std::string last_key;
};

bool parse_checked(std::string_view text, nlohmann::json& out, std::string& error) {
    using nlohmann::json;
    std::vector<Open> open;
    // The path of a container about to open, from its parent's last key or element index.
    auto child_path = [&]() -> std::string {
        if (open.empty()) return "";
        const Open& p = open.back();
        if (p.is_object) return p.path.empty() ? p.last_key : p.path + "." + p.last_key;
        return p.path + "[" + std::to_string(p.elements) + "]";
    };
    auto counted = [&]() {
        if (!open.empty() && !open.back().is_object) open.back().elements++;
    };
    json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
        switch (event) {
            case json::parse_event_t::object_start:
            case json::parse_event_t::array_start: {
                // No file skew reads nests deeper than a few levels; nlohmann's copy, == and dump
                // recurse, so a value nested thousands deep would overflow the stack later.
                if (depth >= MAX_DEPTH)
                    throw Refusal{fmt::format("nested deeper than {} levels at '{}'", MAX_DEPTH, child_path())};
                Open o;
                o.is_object = event == json::parse_event_t::object_start;
                o.path = child_path();
                open.push_back(std::move(o));
                break;
            }
            case json::parse_event_t::object_end:
            case json::parse_event_t::array_end:
                if (!open.empty()) open.pop_back();
                counted();
                break;
            case json::parse_event_t::key: {
                Open& o = open.back();
                std::string k = parsed.is_string() ? parsed.get<std::string>() : parsed.dump();
                if (!o.keys.insert(k).second)
                    throw Refusal{
                        fmt::format("duplicate key '{}' in {}", k,
                                    o.path.empty() ? std::string("the top-level object") : "'" + o.path + "'")};
                o.last_key = std::move(k);
                break;
            }
            case json::parse_event_t::value: counted(); break;
        }
        return true;
    };
    try {
        out = json::parse(text.begin(), text.end(), cb);
    } catch (const Refusal& d) {
        error = d.message;
        return false;
    } catch (const json::exception& e) {
        // "[json.exception.parse_error.101] parse error at line 1, ...": the library's tag dropped.
        const std::string what = e.what();
        const size_t tag = what.rfind("[json.exception.", 0) == 0 ? what.find("] ") : std::string::npos;
        error = tag == std::string::npos ? what : what.substr(tag + 2);
        return false;
    }
    return true;
}

}  // namespace

bool json_try_parse_strict(std::string_view text, nlohmann::json& out, std::string& error) {
    return parse_checked(text, out, error);
}

nlohmann::json json_parse_strict(std::string_view text, const std::string& source) {
    nlohmann::json j;
    std::string error;
    if (!parse_checked(text, j, error)) fail("{}: {}", source, error);
    return j;
}

std::string json_text(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_string_or(const nlohmann::json& j, const char* key, const std::string& fallback,
                           const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_string()) fail("{}: '{}' must be a string, got {}", source, key, it->dump());
    return it->get<std::string>();
}

int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& source) {
    if (!j.is_object()) fail("{}: not a JSON object", source);
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)))
        fail("{}: '{}' must be an integer, got {}", source, key, it->dump());
    return it->get<int64_t>();
}

}  // namespace skew
