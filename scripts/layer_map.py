#!/usr/bin/env python3
"""The layer map of a skew tree (docs/architecture.md): files and lines per top folder, the include
arrows between folders, the largest functions (brace-matched, approximate).
Usage: layer_map.py [--check] [ROOT]
--check prints nothing but the include arrows that break the layering (a folder including one of a
layer above it, or one beside it on the same level) with the first file and line of each, and exits 1
when there is one (a ctest runs it)."""
import os, re, sys, collections
args = [a for a in sys.argv[1:] if a != "--check"]
check = "--check" in sys.argv[1:]
root = args[0] if args else "."
folders = ["engine", "plan", "runtime", "model", "optim", "checkpoint", "train", "hf", "eval", "dist", "kernels",
           "data", "tools", "bench"]
# The layers, lowest first (docs/architecture.md's table): a folder includes only folders of a lower
# level. engine/ and kernels/ are one level (the config and the Backend interface use each other's
# types); every other pair on one level knows nothing of each other (model/ and optim/; train/,
# hf/ and eval/).
LEVEL = {"engine": 0, "kernels": 0, "data": 1, "dist": 1, "model": 2, "optim": 2, "plan": 3, "checkpoint": 3,
         "runtime": 4, "train": 5, "hf": 5, "eval": 5, "tools": 6, "bench": 6}
SAME_LEVEL_ALLOWED = {("engine", "kernels"), ("kernels", "engine")}
files = collections.defaultdict(list)
for f in folders:
    for dp, _, fns in os.walk(os.path.join(root, f)):
        for fn in fns:
            if fn.endswith((".h", ".cpp", ".cu", ".cuh")):
                files[f].append(os.path.join(dp, fn))
arrows = collections.Counter()
first_at = {}  # (from, to) -> "file:line" of its first include
funcs = []
inc = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
sig = re.compile(r'^[A-Za-z_].*?([A-Za-z_][A-Za-z0-9_:~]*)\s*\([^;]*$')
for f, lst in files.items():
    for p in lst:
        lines = open(p, errors="replace").read().split("\n")
        for n, ln in enumerate(lines, 1):
            m = inc.match(ln)
            if m and m.group(1) != f and m.group(1) in folders:
                arrows[(f, m.group(1))] += 1
                first_at.setdefault((f, m.group(1)), f"{os.path.relpath(p, root)}:{n}")
        # largest functions: a line at column 0 that opens a body
        i = 0
        while i < len(lines):
            ln = lines[i]
            if re.match(r'^[A-Za-z_][^;]*\)\s*(const)?\s*(noexcept)?\s*(->\s*[^{]*)?\{\s*$', ln) and not ln.startswith(("namespace", "struct", "class", "enum", "extern")):
                depth = 0; j = i
                while j < len(lines):
                    depth += lines[j].count("{") - lines[j].count("}")
                    if depth <= 0 and j > i: break
                    j += 1
                name = re.findall(r'([A-Za-z_][A-Za-z0-9_:~]*)\s*\(', ln)
                funcs.append((j - i + 1, os.path.relpath(p, root), name[0] if name else "?"))
                i = j
            i += 1
if check:
    bad = [(a, b) for (a, b) in sorted(arrows) if LEVEL[b] > LEVEL[a] or (LEVEL[b] == LEVEL[a] and (a, b) not in SAME_LEVEL_ALLOWED)]
    for a, b in bad:
        where = "above" if LEVEL[b] > LEVEL[a] else "beside"
        print(f"{a} -> {b}: {arrows[(a, b)]} include(s), first at {first_at[(a, b)]}: {b}/ is a layer {where} {a}/")
    sys.exit(1 if bad else 0)
print("| folder | files | lines |\n| --- | ---: | ---: |")
for f in folders:
    if files[f]:
        n = sum(len(open(p, errors="replace").read().split("\n")) - 1 for p in files[f])
        print(f"| {f} | {len(files[f])} | {n} |")
print("\nInclude arrows between folders (count of #include lines):")
for (a, b), c in sorted(arrows.items()):
    print(f"  {a} -> {b}: {c}")
print("\nLargest functions (lines):")
for n, p, name in sorted(funcs, reverse=True)[:15]:
    print(f"  {n:4d} {p} {name}")
big = [("train/trainer.cpp"), ("model/model.cpp")]
for b in big:
    p = os.path.join(root, b)
    if os.path.exists(p):
        print(f"\n{b}: {len(open(p).read().split(chr(10))) - 1} lines", end="")
print()
