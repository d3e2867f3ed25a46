#!/usr/bin/env python3
"""The CPU perf table of docs/backend-ops.md from a bench_ops JSON result: the roofline line, then
one markdown table per shape set (op, shape, fastest time in microseconds, GFLOP/s, GB/s, fraction of
the roofline measured in the same run).  Usage: python3 bench/ops_table_md.py bench/results/ops_cpu_table.json"""
import json
import sys


def main(path):
    d = json.load(open(path))
    r = d["roofline"]
    print(f"Roofline: {r['roofline_gflops']:.1f} GFLOP/s ({r['gemm']}), {r['roofline_gbps']:.1f} GB/s ({r['copy']}).")
    sets = {}
    for op in d["ops"]:
        name, _, shape = op["shape"].partition(": ")
        sets.setdefault(name, []).append((op, shape))
    for name, rows in sets.items():
        label = name + (", scaled" if d["shapes"].get(name, {}).get("scaled") else "")
        print(f"\n| op | shape ({label}) | us | GFLOP/s | GB/s | roofline |\n| --- | --- | ---: | ---: | ---: | ---: |")
        for op, shape in rows:
            print(f"| {op['op']} | {shape} | {op['us']:.0f} | {op['gflops']:.1f} | {op['gbps']:.1f} | "
                  f"{100 * op['roofline_fraction']:.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
