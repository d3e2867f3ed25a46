// Parsing of byte sizes with explicit units (GiB, GB, MiB, MB, TiB, TB, KiB, KB) and GiB printing.
#include "engine/sizes.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "engine/error.h"

namespace skew {

ParsedSize parse_size(const std::string& text, const std::string& what) {
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const char* begin = text.c_str() + i;
    char* end = nullptr;
    double value = std::strtod(begin, &end);
    if (end == begin || !std::isfinite(value) || value < 0)
        fail("{}: '{}' is not a size; write a non-negative number and a unit, e.g. 40GiB, 40GB or 512MiB", what, text);
    std::string unit(end);
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(unit.begin());
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
    std::string lower;
    for (char c : unit) lower += char(std::tolower(static_cast<unsigned char>(c)));
    struct U {
        const char* name;
        double scale;
        const char* label;
    };
    static const U units[] = {
        {"kib", 1024.0, "KiB (2^10 bytes)"},          {"kb", 1e3, "kB (10^3 bytes)"},
        {"mib", 1048576.0, "MiB (2^20 bytes)"},       {"mb", 1e6, "MB (10^6 bytes)"},
        {"gib", 1073741824.0, "GiB (2^30 bytes)"},    {"gb", 1e9, "GB (10^9 bytes)"},
        {"tib", 1099511627776.0, "TiB (2^40 bytes)"}, {"tb", 1e12, "TB (10^12 bytes)"},
    };
    if (lower.empty())
        fail("{}: '{}' has no unit; write e.g. {}GiB (2^30 bytes) or {}GB (10^9 bytes)", what, text, text, text);
    for (const U& u : units) {
        if (lower == u.name) {
            double bytes = value * u.scale;
            if (bytes > 9.2e18) fail("{}: '{}' is too large", what, text);
            return ParsedSize{int64_t(std::llround(bytes)), u.label};
        }
    }
    fail("{}: unknown unit '{}' in '{}'; use GiB, GB, MiB, MB, TiB, TB, KiB or kB", what, unit, text);
}

std::string format_gib(int64_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / 1073741824.0); }

}  // namespace skew
