// Bytes a user gave us, made safe to echo: UTF-8 validation and \xNN escaping of invalid or
// non-printable bytes, so an error message never writes raw control or broken bytes to a terminal.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace skew {

/// True when text is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool utf8_valid(std::string_view text);

/// Length in bytes of the well-formed UTF-8 sequence at text[i], or 0 when the bytes there are not one.
size_t utf8_sequence_length(std::string_view text, size_t i);

/// text for an error message: valid printable UTF-8 unchanged; control characters, DEL and bytes
/// that are not well-formed UTF-8 written as \xNN (a backslash is kept as is).
std::string escape_text(std::string_view text);

}  // namespace skew
