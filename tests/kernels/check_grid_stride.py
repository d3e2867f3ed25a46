#!/usr/bin/env python3
"""Every CUDA kernel launched with grid_for() loops in steps of grid_stride().

grid_for (kernels/cuda/common.cuh) caps a 1-D grid at 2^20 blocks, so a kernel that handles one
element per thread and returns past the end silently skips every element beyond the cap (2^28 at
256 threads). This check reads kernels/cuda/*.cu and *.cuh: for each `NAME<<<grid_for(...` launch it finds
the kernel's body and fails, naming the file and kernel, when the body has no grid_stride() loop.
    python3 tests/kernels/check_grid_stride.py SOURCE_DIR
"""
import pathlib
import re
import sys


def kernel_bodies(text):
    """{name: body} of every __global__ function in text (templates included, body by brace matching)."""
    bodies = {}
    for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\s*\(", text):
        start = text.find("{", m.end())
        depth, i = 0, start
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        bodies[m.group(1)] = text[start:i + 1]
    return bodies


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    sources = sorted((root / "kernels" / "cuda").glob("*.cu")) + sorted((root / "kernels" / "cuda").glob("*.cuh"))
    if not sources:
        print(f"check_grid_stride: no kernels/cuda/*.cu under {root}")
        return 1
    bodies, launches = {}, []
    for f in sources:
        text = f.read_text()
        bodies.update(kernel_bodies(text))
        for m in re.finditer(r"(\w+)(?:<[^<>;]*>)?\s*<<<\s*grid_for\(", text):
            launches.append((f.relative_to(root), m.group(1)))
    bad = 0
    for f, name in launches:
        body = bodies.get(name)
        if body is None:
            print(f"{f}: {name} is launched with grid_for but no __global__ {name} was found")
            bad += 1
        elif "grid_stride()" not in body:
            print(f"{f}: {name} is launched with grid_for (at most 2^20 blocks) but has no grid_stride() loop:"
                  " elements past the capped grid are skipped")
            bad += 1
    print(f"check_grid_stride: {len(launches)} grid_for launches of {len(set(n for _, n in launches))} kernels, "
          f"{bad} without a grid-stride loop")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
