// Python's str methods over the tables Python itself uses (see py_text.h): table lookups, the
// surrogateescape decoding of UTF-8, and CPython's Final_Sigma rule (unicodeobject.c,
// handle_capital_sigma).
#include "eval/py_text.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <span>
#include <vector>

#include "engine/text.h"

namespace skew::eval {
namespace {

struct CodePointRange {
    uint32_t first, last;
};
// Code points first, first + stride, ... <= last map to code point + delta.
struct CaseRun {
    uint32_t first, last;
    int32_t delta;
    uint32_t stride;
};
// A mapping to two or three code points (unused slots 0).
struct CaseSpecial {
    uint32_t code_point;
    uint32_t out[3];
};

#include "eval/py_unicode_tables.inc"

constexpr uint32_t SIGMA = 0x03A3, SMALL_SIGMA = 0x03C3, FINAL_SIGMA = 0x03C2;
constexpr uint32_t ESCAPE_FIRST = 0xDC80, ESCAPE_LAST = 0xDCFF;  // surrogateescape of bytes 0x80..0xFF

bool in_ranges(std::span<const CodePointRange> t, uint32_t c) {
    const auto it =
        std::upper_bound(t.begin(), t.end(), c, [](uint32_t v, const CodePointRange& r) { return v < r.first; });
    return it != t.begin() && c <= std::prev(it)->last;
}

// The mapping of c into out; returns its length (1 with out[0] = c when c maps to itself).
int case_map(std::span<const CaseRun> runs, std::span<const CaseSpecial> special, uint32_t c, uint32_t out[3]) {
    const auto r =
        std::upper_bound(runs.begin(), runs.end(), c, [](uint32_t v, const CaseRun& x) { return v < x.first; });
    if (r != runs.begin()) {
        const CaseRun& x = *std::prev(r);
        if (c <= x.last && (c - x.first) % x.stride == 0) {
            out[0] = uint32_t(int64_t(c) + x.delta);
            return 1;
        }
    }
    const auto s = std::lower_bound(special.begin(), special.end(), c,
                                    [](const CaseSpecial& x, uint32_t v) { return x.code_point < v; });
    if (s != special.end() && s->code_point == c) {
        int n = 0;
        for (uint32_t o : s->out)
            if (o) out[n++] = o;
        return n;
    }
    out[0] = c;
    return 1;
}

std::vector<uint32_t> decode(std::string_view s) {
    std::vector<uint32_t> cps;
    cps.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_sequence_length(s, i);
        const auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k])); };
        if (n == 0) {
            cps.push_back(ESCAPE_FIRST - 0x80 + b(0));
            ++i;
            continue;
        }
        uint32_t cp = n == 1 ? b(0) : n == 2 ? b(0) & 0x1F : n == 3 ? b(0) & 0x0F : b(0) & 0x07;
        for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (b(k) & 0x3F);
        cps.push_back(cp);
        i += n;
    }
    return cps;
}

void append(std::string& out, uint32_t cp) {
    if (cp >= ESCAPE_FIRST && cp <= ESCAPE_LAST) {
        out += char(cp - ESCAPE_FIRST + 0x80);
    } else if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

void append_mapped(std::string& out, std::span<const CaseRun> runs, std::span<const CaseSpecial> special, uint32_t c) {
    uint32_t m[3];
    const int n = case_map(runs, special, c, m);
    for (int k = 0; k < n; ++k) append(out, m[k]);
}

bool case_ignorable(uint32_t c) { return in_ranges(kCaseIgnorable, c); }
bool cased(uint32_t c) { return in_ranges(kCased, c); }

// CPython's handle_capital_sigma: U+03A3 at i is final when a cased letter precedes it and none
// follows it, case-ignorable code points skipped both ways.
uint32_t lower_sigma(const std::vector<uint32_t>& cps, size_t i) {
    size_t j = i;
    while (j > 0 && case_ignorable(cps[j - 1])) --j;
    bool final_sigma = j > 0 && cased(cps[j - 1]);
    if (final_sigma) {
        size_t k = i + 1;
        while (k < cps.size() && case_ignorable(cps[k])) ++k;
        final_sigma = k == cps.size() || !cased(cps[k]);
    }
    return final_sigma ? FINAL_SIGMA : SMALL_SIGMA;
}

// Lower-case cps[from..] onto out (str.lower's loop).
void append_lower(std::string& out, const std::vector<uint32_t>& cps, size_t from) {
    for (size_t i = from; i < cps.size(); ++i) {
        if (cps[i] == SIGMA) append(out, lower_sigma(cps, i));
        else append_mapped(out, kLowerRuns, kLowerSpecial, cps[i]);
    }
}

// s less its whitespace (py_isspace) at the end, and at the start when `leading`.
std::string strip(std::string_view s, bool leading) {
    const std::vector<uint32_t> cps = decode(s);
    size_t b = 0, e = cps.size();
    if (leading)
        while (b < e && py_isspace(cps[b])) ++b;
    while (e > b && py_isspace(cps[e - 1])) --e;
    std::string out;
    for (size_t i = b; i < e; ++i) append(out, cps[i]);
    return out;
}

}  // namespace

bool py_isspace(uint32_t code_point) { return in_ranges(kSpace, code_point); }

int64_t utf8_length(std::string_view s) { return int64_t(decode(s).size()); }

std::string py_strip(std::string_view s) { return strip(s, true); }
std::string py_rstrip(std::string_view s) { return strip(s, false); }

std::string py_lower(std::string_view s) {
    std::string out;
    append_lower(out, decode(s), 0);
    return out;
}

std::string py_upper(std::string_view s) {
    std::string out;
    for (uint32_t c : decode(s)) append_mapped(out, kUpperRuns, kUpperSpecial, c);
    return out;
}

std::string py_capitalize(std::string_view s) {
    const std::vector<uint32_t> cps = decode(s);
    std::string out;
    if (cps.empty()) return out;
    append_mapped(out, kTitleRuns, kTitleSpecial, cps[0]);
    append_lower(out, cps, 1);
    return out;
}

bool py_int(std::string_view text, int64_t& value) {
    const std::vector<uint32_t> cps = decode(py_strip(text));
    size_t i = 0;
    const bool negative = !cps.empty() && cps[0] == '-';
    if (!cps.empty() && (cps[0] == '-' || cps[0] == '+')) ++i;
    if (i == cps.size()) return false;
    uint64_t magnitude = 0;
    bool after_digit = false;
    for (; i < cps.size(); ++i) {
        if (cps[i] == '_') {  // only between two digits
            if (!after_digit || i + 1 == cps.size()) return false;
            after_digit = false;
            continue;
        }
        const uint32_t c = cps[i];
        const auto run = std::upper_bound(std::begin(kDecimalStarts), std::end(kDecimalStarts), c);
        if (run == std::begin(kDecimalStarts) || c - *std::prev(run) > 9) return false;
        const uint64_t digit = c - *std::prev(run);
        if (magnitude > (uint64_t(INT64_MAX) + 1 - digit) / 10) return false;
        magnitude = magnitude * 10 + digit;
        after_digit = true;
    }
    if (!negative && magnitude > uint64_t(INT64_MAX)) return false;
    value = negative ? int64_t(0 - magnitude) : int64_t(magnitude);
    return true;
}

const char* py_tables_python_version() { return kPythonVersion; }
const char* py_tables_unicode_version() { return kUnicodeVersion; }

}  // namespace skew::eval
