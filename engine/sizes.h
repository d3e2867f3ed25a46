// Byte sizes on the command line: "40GiB", "40GB", "512MiB", "1.5TiB" (binary units are powers of
// 1024, decimal units powers of 1000; the paper's "GB" is GiB). Printing always uses GiB.
#pragma once
#include <cstdint>
#include <string>

namespace skew {

struct ParsedSize {
    int64_t bytes = 0;
    std::string unit;  // the unit as understood, e.g. "GiB (2^30 bytes)"
};

/// Parse a size such as "40GiB", "40 GB", "512MiB", "80gib"; a bare number is refused (the unit
/// must be explicit). Throws skew::Error naming `what` (e.g. "--budget") on bad input.
ParsedSize parse_size(const std::string& text, const std::string& what);

/// Bytes as GiB with two decimals, e.g. "1.29 GiB".
std::string format_gib(int64_t bytes);

}  // namespace skew
