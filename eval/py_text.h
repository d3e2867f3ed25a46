// Python's str methods on UTF-8 text, as the LM Evaluation Harness (Python) applies them to task
// text (docs/evaluation.md): isspace, strip/rstrip, lower, upper, capitalize, int and len, on all of
// Unicode with Python's own tables (eval/py_unicode_tables.inc, tools/make_py_unicode_tables.py).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace skew::eval {

// Text is decoded as UTF-8; a byte that is not part of well-formed UTF-8 stands for itself, as
// Python's "surrogateescape" decoding keeps it (U+DC80..U+DCFF: no case, not whitespace), and is
// written back unchanged. Task files parsed from JSON are always well-formed.

/// Python's str.isspace() of one code point (U+0009..U+000D, U+001C..U+0020, U+0085, U+00A0,
/// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 in Unicode 14.0).
bool py_isspace(uint32_t code_point);

/// Python len(): the number of code points (an invalid byte counts one).
int64_t utf8_length(std::string_view s);

/// Python str.strip() and str.rstrip() without arguments: Unicode whitespace (py_isspace) removed
/// from both ends, or from the end.
std::string py_strip(std::string_view s);
std::string py_rstrip(std::string_view s);

/// Python str.lower(): full lowercase mappings ('İ' -> 'i̇', two code points), with CPython's
/// Final_Sigma rule: 'Σ' becomes 'ς' after a cased letter (case-ignorable ones skipped) and not
/// before one, else 'σ'.
std::string py_lower(std::string_view s);

/// Python str.upper(): full uppercase mappings ('ß' -> 'SS').
std::string py_upper(std::string_view s);

/// Python (3.8+) str.capitalize(): the first character title-cased ('ǆ' -> 'ǅ', 'ß' -> 'Ss'), the
/// rest lower-cased as py_lower does (Final_Sigma included).
std::string py_capitalize(std::string_view s);

/// Python int(text) in base 10: whitespace around it (py_isspace), an optional sign, digits of any
/// script (Unicode decimal digits: '٣' is 3) with single underscores between them ("1_000").
/// Returns false where Python raises ValueError, or when the value does not fit in int64.
bool py_int(std::string_view text, int64_t& value);

/// The Python and Unicode versions the tables were generated with ("3.11.2", "14.0.0").
const char* py_tables_python_version();
const char* py_tables_unicode_version();

}  // namespace skew::eval
