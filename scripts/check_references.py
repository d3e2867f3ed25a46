#!/usr/bin/env python3
"""Every repository path a source file, script or doc names must exist: a comment citing
`engine/arena.h` or `docs/training.md` points at a real file. Paths are matched by their top
folder (the repository's own) and extension; a name with a wildcard or a placeholder (<opt>) is
skipped. A doc cited with a section, `docs/design.md, "Router (fp32)"` (optionally in parentheses,
with or without the comma) or `docs/optimizers.md §9.1`, must have it: a heading or a bold
paragraph title (`**Router (fp32).**`) that starts with the quoted words (case, backticks and a
section number ignored), or a heading numbered 9.1. Prints each dangling reference as FILE:LINE:
PATH [SECTION] and exits 1 when there is one.
Usage: check_references.py [ROOT]"""
import os
import re
import subprocess
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
os.chdir(root)
tops = [d for d in os.listdir(".") if os.path.isdir(d) and not d.startswith(".") and not d.startswith("build")
        and d not in ("runs", "data", "Testing")] + ["data"]
pattern = re.compile(r"(?<![\w./$-])((?:%s)/[\w./-]*\w\.(?:h|cpp|cu|cuh|md|py|sh|yaml|txt|json))(?![\w])" % "|".join(map(re.escape, tops)))
files = subprocess.check_output(["git", "ls-files"], text=True).split()
exts = (".h", ".cpp", ".cu", ".cuh", ".md", ".py", ".sh", ".txt", ".yaml")
section_ref = re.compile(r'(docs/[\w-]+\.md)(?:,?\s*\(?"([^"<>]{2,120})"|,?\s*§(\d+(?:\.\d+)*))')
sections = {}  # doc -> (titles, section numbers)


def norm(title):
    return re.sub(r"\s+", " ", title.replace("`", "").replace("*", "")).strip().rstrip(".:").lower()


def sections_of(doc):
    """The headings and bold paragraph titles of a doc (outside code blocks), and its section numbers."""
    if doc not in sections:
        titles, numbers, in_code = [], set(), False
        for line in open(doc, encoding="utf-8", errors="replace"):
            if line.startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"#+\s+(.*)", line)
            if m:
                t = m.group(1).strip()
                n = re.match(r"§?(\d+(?:\.\d+)*)\.?\s+(.*)", t)
                if n:
                    numbers.add(n.group(1))
                    t = n.group(2)
                titles.append(norm(t))
            titles += [norm(b) for b in re.findall(r"\*\*([^*]+)\*\*", line)]
        sections[doc] = (titles, numbers)
    return sections[doc]


bad = []
for f in files:
    if not f.endswith(exts) or f.endswith("CMakeLists.txt") or f.startswith(("tests/fixtures/", "fuzz/corpus/", "fuzz/regressions/")):
        continue
    try:
        text = open(f, encoding="utf-8", errors="replace").read()
    except OSError:
        continue
    for n, line in enumerate(text.split("\n"), 1):
        for m in pattern.finditer(line):
            path = m.group(1)
            if any(c in path for c in "*<>{}") or path.startswith(("data/prepared/", "data/corpus", "data/tokenizer/")):
                continue
            if not os.path.exists(path):
                bad.append(f"{f}:{n}: {path}")
        for m in section_ref.finditer(line):
            doc, quoted, number = m.groups()
            if not os.path.exists(doc):
                continue  # reported above
            titles, numbers = sections_of(doc)
            if quoted and not any(t.startswith(norm(quoted)) for t in titles):
                bad.append(f'{f}:{n}: {doc} "{quoted}" (no such heading or paragraph title)')
            elif number and number not in numbers:
                bad.append(f"{f}:{n}: {doc} §{number} (no such section)")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
