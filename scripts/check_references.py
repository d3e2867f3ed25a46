#!/usr/bin/env python3
"""Every repository path a source file, script or doc names must exist: a comment citing
`engine/arena.h` or `docs/training.md` points at a real file. Paths are matched by their top
folder (the repository's own) and extension; a name with a wildcard or a placeholder (<opt>) is
skipped. Prints each dangling reference as FILE:LINE: PATH and exits 1 when there is one.
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
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
