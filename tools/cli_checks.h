// Flag validators for the `skew` subcommands: integer and probability ranges that CLI11 refuses
// (exit 2, "the command-line parser refuses") with a message in the flag's own terms.
#pragma once
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace skew::tools {

/// An integer flag of at least `lo`: refuses non-integers ("abc", "1.5") and smaller values,
/// naming the value and the bound.
inline CLI::Validator int_at_least(int64_t lo) {
    return CLI::Validator(
        [lo](std::string& s) -> std::string {
            errno = 0;
            char* end = nullptr;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || *end != '\0' || errno == ERANGE) return "'" + s + "' is not an integer";
            if (v < lo) return s + " is below the smallest allowed value, " + std::to_string(lo);
            return "";
        },
        "INT >= " + std::to_string(lo));
}

/// An unsigned 64-bit flag (a seed): digits only, at most 2^64 - 1; "-1" is refused, not wrapped.
inline CLI::Validator uint64_value() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
                return "'" + s + "' is not a non-negative integer";
            errno = 0;
            std::strtoull(s.c_str(), nullptr, 10);
            if (errno == ERANGE) return s + " is larger than 2^64 - 1";
            return "";
        },
        "UINT64");
}

/// A probability flag in (0, 1] (top-p): refuses 0, negatives, values above 1 and non-numbers.
inline CLI::Validator probability_open_closed() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || *end != '\0') return "'" + s + "' is not a number";
            if (!(v > 0.0 && v <= 1.0)) return s + " is outside (0, 1]";
            return "";
        },
        "FLOAT in (0, 1]");
}

/// A non-negative real flag (temperature).
inline CLI::Validator real_at_least_zero() {
    return CLI::Validator(
        [](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || *end != '\0') return "'" + s + "' is not a number";
            if (!(v >= 0.0)) return s + " is below 0";
            return "";
        },
        "FLOAT >= 0");
}

}  // namespace skew::tools
