#!/usr/bin/python3
# Python's own answers for every code point, read by tests/eval/test_py_text.cpp to check skew's
# copies of str.isspace, lower, upper, capitalize (eval/py_text.h) on all of Unicode:
#   isspace                      ranges of code points c with chr(c).isspace()
#   lower, upper, capitalize     [c, [code points of the result]] for every c the method changes
#   sigma_after                  ranges of c where (c + "Σ").lower() ends in "ς"
#   sigma_between                ranges of c where ("A" + c + "Σ").lower() ends in "ς"
#   sigma_before                 ranges of c where ("AΣ" + c).lower()[1] == "ς"
#   int                          [c, int(chr(c))] for every c that int() reads (the rest raise ValueError)
#   int_examples                 [text, int(text) or null where it raises ValueError]
#   examples                     whole strings with their len, strip, rstrip, lower, upper, capitalize
# Surrogates are left out (UTF-8 cannot hold them). Generate with the Python that generated
# eval/py_unicode_tables.inc (tools/make_py_unicode_tables.py); the test checks the versions agree.
#
# Run:  /usr/bin/python3 tests/reference/eval/make_py_text.py   (writes tests/fixtures/eval/py_text.json)
import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "fixtures", "eval", "py_text.json")

INT_EXAMPLES = ["2", " 3 ", "\u00a012\u3000", "+7", "-0", "007", "1_000", "1__0", "_1", "1_", "\u0663", "\uff12\uff10",
                "\u0967\u0968", "1.0", "", " ", "+", "- 1", "1 2", "\u00b2", "\u2167", "9223372036854775807",
                "-9223372036854775808", "0x10", "\U0001D7D8"]


def py_int(text):
    try:
        return int(text)
    except ValueError:
        return None


EXAMPLES = [
    "hELLO World",
    "ΟΔΟΣ ΟΔΟΣ.",
    "ΣΑΣ",
    "aΣ'b",
    "A\u0301Σ\u0301",
    "ǆemal ǅ Ǆ",
    "ﬁx ﬂow ŉ",
    "İstanbul KIRK",
    "straße STRASSE",
    "\u00a0\u2009 x \u3000\u0085",
    "\x1c\x1f text \x1e\x1d",
    "\u200b zero width \u200b",
    "the mouse\u00a0",
    "ⓐⓑⓒ Ⓐ",
    "𐐨𐐩 𐐀",
    "ᾳ ᾼ ῳ",
    "ΐ ΰ",
    "",
]


def code_points():
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def ranges(points):
    out = []
    for c in points:
        if out and (c == out[-1][1] + 1 or (out[-1][1] == 0xD7FF and c == 0xE000)):
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def changed(fn):
    return [[c, [ord(x) for x in fn(chr(c))]] for c in code_points() if fn(chr(c)) != chr(c)]


def main():
    cps = code_points()
    out = {
        "python": sys.version.split()[0],
        "unicode": unicodedata.unidata_version,
        "isspace": ranges([c for c in cps if chr(c).isspace()]),
        "lower": changed(str.lower),
        "upper": changed(str.upper),
        "capitalize": changed(str.capitalize),
        "sigma_after": ranges([c for c in cps if (chr(c) + "\u03a3").lower()[-1] == "\u03c2"]),
        "sigma_between": ranges([c for c in cps if ("A" + chr(c) + "\u03a3").lower()[-1] == "\u03c2"]),
        "sigma_before": ranges([c for c in cps if ("A\u03a3" + chr(c)).lower()[1] == "\u03c2"]),
        "int": [[c, int(chr(c))] for c in cps if py_int(chr(c)) is not None],
        "int_examples": [[t, py_int(t)] for t in INT_EXAMPLES],
        "examples": [{"text": s, "len": len(s), "strip": s.strip(), "rstrip": s.rstrip(), "lower": s.lower(), "upper": s.upper(),
                      "capitalize": s.capitalize()} for s in EXAMPLES],
    }
    with open(OUT, "w", encoding="ascii") as f:
        json.dump(out, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {OUT}: Python {out['python']}, Unicode {out['unicode']}, "
          f"{len(out['lower'])} lower / {len(out['upper'])} upper / {len(out['capitalize'])} capitalize mappings")


if __name__ == "__main__":
    main()
