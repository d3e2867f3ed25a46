#!/usr/bin/env python3
"""ctest `bench`: bench/compare_step_logs.py (the GPU check's CUDA-vs-CPU verdict) on hand-written
step logs: equal logs pass; a loss 2e-3 apart at one step, a grad norm 5% apart, a short log and a
missing log fail, each naming the optimizer. Python 3 standard library only; exit 0 when every
check holds."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "compare_step_logs.py")
failures = []


def write(run, opt, rows):
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, f"steps_{opt}.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def steps(n, loss=lambda t: 10.0 - 0.1 * t, norm=lambda t: 1.0 + 0.01 * t):
    return [{"step": t, "lm_loss": loss(t), "grad_norm": norm(t)} for t in range(1, n + 1)]


def compare(ref, other, opts, *extra):
    p = subprocess.run([sys.executable, SCRIPT, ref, other, "--optimizers", opts, "--steps", "5", *extra],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as tmp:
    ref, other = os.path.join(tmp, "cpu"), os.path.join(tmp, "gpu")
    write(ref, "a", steps(5))
    write(other, "a", steps(5, loss=lambda t: (10.0 - 0.1 * t) * (1 + 1e-4)))
    rc, out = compare(ref, other, "a")
    if rc != 0 or "a: PASS" not in out:
        failures.append(f"1e-4 apart should pass: {rc} {out}")
    write(other, "a", steps(5, loss=lambda t: (10.0 - 0.1 * t) * (1 + (2e-3 if t == 3 else 0))))
    rc, out = compare(ref, other, "a")
    if rc != 1 or "a: FAIL" not in out or "worst step 3" not in out:
        failures.append(f"2e-3 apart at step 3 should fail naming step 3: {rc} {out}")
    write(other, "a", steps(5, norm=lambda t: (1.0 + 0.01 * t) * 1.05))
    rc, out = compare(ref, other, "a")
    if rc != 1 or "a: FAIL" not in out:
        failures.append(f"a grad norm 5% apart should fail: {rc} {out}")
    write(other, "a", steps(3))
    rc, out = compare(ref, other, "a")
    if rc != 1 or "only 3 of 5 steps" not in out:
        failures.append(f"a short log should fail: {rc} {out}")
    write(other, "a", steps(5))
    rc, out = compare(ref, other, "a,b")
    if rc != 1 or "b: FAIL (no step log" not in out or "a: PASS" not in out:
        failures.append(f"a missing optimizer should fail alone: {rc} {out}")
    js = os.path.join(tmp, "c.json")
    rc, out = compare(ref, other, "a", "--json", js)
    if rc != 0 or json.load(open(js))["results"][0]["pass"] is not True:
        failures.append(f"--json should record the pass: {rc} {out}")

for f in failures:
    print("FAILED:", f)
print("compare_step_logs:", "all checks passed" if not failures else f"{len(failures)} failed")
sys.exit(1 if failures else 0)
