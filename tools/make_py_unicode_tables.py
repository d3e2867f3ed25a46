#!/usr/bin/python3
"""Write eval/py_unicode_tables.inc: the Unicode tables behind Python's str methods, for eval/py_text.

The LM Evaluation Harness prepares task text with Python's str.strip/rstrip, str.capitalize and
str.lower; skew's copies of them (eval/py_text.h) read these tables, taken from the running Python
itself, character by character:
  - whitespace: chr(c).isspace() (Python's own rule: bidirectional class WS, B, S or category Zs,
    so U+001C..U+001F are whitespace and U+200B is not);
  - lower, upper, title: chr(c).lower(), .upper(), .title(), Python's full case mappings (up to
    three code points: 'ß'.upper() == 'SS', 'İ'.lower() == 'i̇');
  - for the Final_Sigma rule of lower() and capitalize() (CPython's handle_capital_sigma): the
    code points lower() skips as case-ignorable and those it takes as cased, read off how Python
    lowers U+03A3 next to each code point: (c + 'Σ').lower() ends in 'ς' exactly when c is cased
    and not case-ignorable; ('A' + c + 'Σ').lower() when c is case-ignorable or cased.
  - decimal digits: the first code point of every run of ten whose unicodedata.decimal() is 0..9
    (what int() reads as digits; every such run is ten consecutive code points).
Single-code-point mappings are stored as runs (first, last, delta, stride 1 or 2); the others as
special entries. Surrogates (U+D800..U+DFFF) are left out: UTF-8 text cannot hold them.

Usage: /usr/bin/python3 tools/make_py_unicode_tables.py   (writes eval/py_unicode_tables.inc)
tests/reference/eval/make_py_text.py writes the test fixture that checks the C++ side against the
same Python on every code point; regenerate both with one Python.
"""
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "eval", "py_unicode_tables.inc")
SIGMA, FINAL_SIGMA = "\u03a3", "\u03c2"


def code_points():
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def ranges(points):
    """Sorted code points -> [(first, last)] of consecutive runs (surrogates bridged)."""
    out = []
    for c in points:
        if out and (c == out[-1][1] + 1 or (out[-1][1] == 0xD7FF and c == 0xE000)):
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def case_table(fn):
    """(runs, specials) of one mapping: runs of single-code-point mappings sharing a delta and a
    stride (1 or 2, never spanning a code point mapped otherwise), and the multi-code-point rest."""
    single, special = {}, []
    for c in code_points():
        m = fn(chr(c))
        if m == chr(c):
            continue
        if len(m) == 1:
            single[c] = ord(m) - c
        else:
            assert len(m) <= 3, (hex(c), m)
            special.append((c, [ord(x) for x in m]))
    mapped = set(single) | {c for c, _ in special}
    runs, covered = [], -1
    for c in sorted(single):
        if c <= covered:
            continue
        d = single[c]
        best_last, best_stride = c, 1
        for stride in (1, 2):
            last = c
            while single.get(last + stride) == d and all(x not in mapped for x in range(last + 1, last + stride)):
                last += stride
            if last > best_last:
                best_last, best_stride = last, stride
        runs.append((c, best_last, d, best_stride))
        covered = best_last
    runs.sort()
    for a, b in zip(runs, runs[1:]):
        assert a[1] < b[0], (a, b)  # disjoint spans: one binary search finds the run
    return runs, special


def sigma_classes():
    ignorable, cased = [], []
    for c in code_points():
        t1 = (chr(c) + SIGMA).lower()[-1] == FINAL_SIGMA  # cased and not case-ignorable
        t2 = ("A" + chr(c) + SIGMA).lower()[-1] == FINAL_SIGMA  # case-ignorable or cased
        if t1:
            cased.append(c)
        elif t2:
            ignorable.append(c)
    return ranges(ignorable), ranges(cased)


def decimal_starts():
    starts = [c for c in code_points() if unicodedata.decimal(chr(c), None) == 0]
    for c in starts:
        assert all(unicodedata.decimal(chr(c + k), None) == k for k in range(10)), hex(c)
    assert sum(unicodedata.decimal(chr(c), None) is not None for c in code_points()) == 10 * len(starts)
    return starts


def emit_ranges(name, rs, comment):
    lines = [f"// {comment}", f"inline constexpr CodePointRange {name}[] = {{"]
    items = [f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in rs]
    for i in range(0, len(items), 6):
        lines.append("    " + ", ".join(items[i:i + 6]) + ",")
    lines.append("};")
    return lines


def emit_case(name, runs, special, comment):
    lines = [f"// {comment}", f"inline constexpr CaseRun {name}Runs[] = {{"]
    items = [f"{{0x{a:04X}, 0x{b:04X}, {d}, {s}}}" for a, b, d, s in runs]
    for i in range(0, len(items), 4):
        lines.append("    " + ", ".join(items[i:i + 4]) + ",")
    lines.append("};")
    lines.append(f"inline constexpr CaseSpecial {name}Special[] = {{")
    items = []
    for c, m in special:
        m = m + [0] * (3 - len(m))
        items.append(f"{{0x{c:04X}, {{0x{m[0]:04X}, 0x{m[1]:04X}, 0x{m[2]:04X}}}}}")
    for i in range(0, len(items), 3):
        lines.append("    " + ", ".join(items[i:i + 3]) + ",")
    lines.append("};")
    return lines


def main():
    py = sys.version.split()[0]
    uni = unicodedata.unidata_version
    space = ranges([c for c in code_points() if chr(c).isspace()])
    ignorable, cased = sigma_classes()
    out = [
        f"// Generated by tools/make_py_unicode_tables.py with Python {py} (Unicode {uni}); do not edit.",
        "// Python's str whitespace, full case mappings, Final_Sigma classes and decimal digits, read from Python",
        "// itself code point by code point (see the script); included by eval/py_text.cpp only.",
        "",
        f'inline constexpr const char* kPythonVersion = "{py}";',
        f'inline constexpr const char* kUnicodeVersion = "{uni}";',
        "",
    ]
    out += emit_ranges("kSpace", space, "str.isspace()")
    out.append("")
    out += emit_ranges("kCaseIgnorable", ignorable, "skipped by lower()'s Final_Sigma context (case-ignorable)")
    out.append("")
    out += emit_ranges("kCased", cased, "cased for lower()'s Final_Sigma context (and not case-ignorable)")
    out.append("")
    out.append("// int()'s digits: code points start + 0 .. start + 9 are the digits 0..9 (unicodedata.decimal)")
    out.append("inline constexpr uint32_t kDecimalStarts[] = {")
    starts = [f"0x{c:04X}" for c in decimal_starts()]
    for i in range(0, len(starts), 10):
        out.append("    " + ", ".join(starts[i:i + 10]) + ",")
    out.append("};")
    for name, fn, what in (("kLower", str.lower, "str.lower() of one code point"),
                           ("kUpper", str.upper, "str.upper() of one code point"),
                           ("kTitle", str.title, "str.title() of one code point (capitalize()'s first character)")):
        runs, special = case_table(fn)
        out.append("")
        out += emit_case(name, runs, special, what)
    with open(OUT, "w", encoding="ascii") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {OUT}: Python {py}, Unicode {uni}")


if __name__ == "__main__":
    main()
