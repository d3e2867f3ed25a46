#!/usr/bin/env python3
"""Static check of the CUDA optimizer kernels (kernels/cuda/optim_kernels.cu), run without a GPU:
compiles the file for sm_90a to PTX (`nvcc -ptx`) and assembles it with `ptxas -v` (as
`nvcc -Xptxas -v` does) and fails unless
  * every kernel reports "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" (no local
    memory: no runtime-indexed register arrays, no ABI spills around division slow paths), and
  * the element loops use 16-byte global accesses: ld.global...v4 in every pass over G
    (factored statistics, update RMS, update write, AdamW, Lion) and st.global...v4 in every pass
    that writes W (update write, AdamW, Lion).
Usage: check_optim_kernels_ptx.py <nvcc> <source root>. Exits 77 (ctest: skipped) without nvcc."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
nvcc = sys.argv[1] if len(sys.argv) > 1 else "nvcc"
root = sys.argv[2] if len(sys.argv) > 2 else "."
if not (os.path.isfile(nvcc) or shutil.which(nvcc)):
    print(f"SKIPPED: nvcc not found ('{nvcc}'); the optimizer kernel ptxas/PTX check needs the CUDA toolkit")
    sys.exit(SKIP)
src = os.path.join(root, "kernels/cuda/optim_kernels.cu")
flags = ["-O3", "-std=c++20", "--expt-relaxed-constexpr", "-arch=sm_90a", "-I", root]
with tempfile.TemporaryDirectory() as tmp:
    # One front-end pass to PTX, then ptxas -v on it (what nvcc -Xptxas -v runs, without compiling twice).
    ptx_path = os.path.join(tmp, "k.ptx")
    r = subprocess.run([nvcc, *flags, "-ptx", src, "-o", ptx_path], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("FAIL: nvcc -ptx could not compile " + src)
    ptx = open(ptx_path).read()
    nvcc_path = nvcc if os.path.isfile(nvcc) else shutil.which(nvcc)
    ptxas = os.path.join(os.path.dirname(os.path.realpath(nvcc_path)), "ptxas")
    if not os.path.isfile(ptxas):
        ptxas = shutil.which("ptxas") or "ptxas"
    r = subprocess.run([ptxas, "-v", "-O3", "-arch=sm_90a", ptx_path, "-o", os.path.join(tmp, "k.cubin")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit("FAIL: ptxas failed on the PTX of " + src)
    log = r.stdout + r.stderr

failures = []
kernels = 0
current = None
for line in log.splitlines():
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        current = m.group(1)
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and current:
        kernels += 1
        if m.groups() != ("0", "0", "0"):
            failures.append(f"{current}: {line.strip()}")
if kernels < 20:
    failures.append(f"only {kernels} kernels reported by ptxas -v (expected the optimizer's ~70 instantiations)")

LOADS = ("factored_stats_kernel", "update_sumsq_kernel", "update_apply_kernel", "adamw_kernel", "lion_kernel")
STORES = ("update_apply_kernel", "adamw_kernel", "lion_kernel")
entries = re.split(r"\n(?=\.visible \.entry|\.entry)", ptx)
checked = 0
for body in entries:
    m = re.search(r"\.entry (\S+)\(", body)
    if not m:
        continue
    name = m.group(1)
    if any(k in name for k in LOADS):
        checked += 1
        if not re.search(r"ld\.global[\w.]*\.v4", body):
            failures.append(f"{name}: no 16-byte global load (ld.global...v4) in the PTX")
    if any(k in name for k in STORES) and not re.search(r"st\.global[\w.]*\.v4", body):
        failures.append(f"{name}: no 16-byte global store (st.global...v4) in the PTX")
if checked < 20:
    failures.append(f"only {checked} element-loop kernels found in the PTX")

if failures:
    print("\n".join(failures))
    sys.exit(f"FAIL: {len(failures)} problem(s)")
print(f"ok: {kernels} kernels with 0 bytes stack frame and no spills; {checked} element-loop kernels use v4 accesses")
