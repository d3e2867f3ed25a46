#!/usr/bin/env python3
"""The layer map of a skew tree (docs/architecture.md): files and lines per top folder, the include
arrows between folders, the largest functions (brace-matched, approximate). Usage: layer_map.py [ROOT]"""
import os, re, sys, collections
root = sys.argv[1] if len(sys.argv) > 1 else "."
folders = ["engine", "plan", "runtime", "model", "optim", "train", "hf", "eval", "dist", "kernels", "data", "tools", "bench"]
files = collections.defaultdict(list)
for f in folders:
    for dp, _, fns in os.walk(os.path.join(root, f)):
        for fn in fns:
            if fn.endswith((".h", ".cpp", ".cu", ".cuh")):
                files[f].append(os.path.join(dp, fn))
arrows = collections.Counter()
funcs = []
inc = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
sig = re.compile(r'^[A-Za-z_].*?([A-Za-z_][A-Za-z0-9_:~]*)\s*\([^;]*$')
for f, lst in files.items():
    for p in lst:
        lines = open(p, errors="replace").read().split("\n")
        for ln in lines:
            m = inc.match(ln)
            if m and m.group(1) != f and m.group(1) in folders:
                arrows[(f, m.group(1))] += 1
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
