#!/usr/bin/env python3
"""ctest `bench`: bench/summarize_gpu_train.py on the hand-written run in tests/bench/gpu_train/
(12 steps of the paper's model: 2 warmup steps and one skipped step left out, phase times, metrics
with the measured and planned peaks, plan.json, train.log), and on copies with the phase fields,
plan.json or metrics removed, as a run from a trainer without phase timing or a killed run leaves.
Python 3 standard library only; exit 0 when every check holds."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "bench", "summarize_gpu_train.py")
FIXTURE = os.path.join(HERE, "gpu_train")
ACTIVE = 441_491_456  # ParamTable::active_numel of configs/paper-6.78b.yaml (skew plan --json)
PLAN_GIB = 31_487_451_136 / 2**30  # skew plan's predicted peak of that model at microbatch 64 (plan.json)
failures = []


def check(what, got, want, tol=1e-9):
    ok = (got is None and want is None) if (got is None or want is None) else (
        abs(got - want) <= tol * max(1.0, abs(want)) if isinstance(want, float) else got == want)
    if not ok:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def run(train_dir, *extra):
    out = os.path.join(train_dir, "summary.json")
    p = subprocess.run([sys.executable, SCRIPT, train_dir, "--out", out, *extra], capture_output=True, text=True)
    if p.returncode != 0:
        return p.returncode, None
    with open(out) as f:
        return 0, json.load(f)


def copy_fixture(tmp, name):
    d = os.path.join(tmp, name)
    shutil.copytree(FIXTURE, d)
    return d


with tempfile.TemporaryDirectory() as tmp:
    # 1. everything there
    rc, s = run(copy_fixture(tmp, "full"))
    check("full: exit", rc, 0)
    if s:
        check("full: commit", s["commit"], "0123456789abcdef0123456789abcdef01234567")
        check("full: device", s["device"], "NVIDIA H200")
        check("full: microbatch", s["microbatch"], 64)
        check("full: steps logged", s["steps_logged"], 12)
        check("full: steps measured (2 warmup, 1 skipped left out)", s["steps_measured"], 9)
        check("full: median tokens/s", s["tokens_per_sec_median"], 100500.0)
        check("full: active parameters", s["active_params_per_token"], ACTIVE)
        check("full: MFU", s["mfu"], 6 * ACTIVE * 100500.0 / 989e12)
        check("full: fwd_bwd_ms", s["phase_ms_median"]["fwd_bwd_ms"], 64.0)
        check("full: grad_norm_ms", s["phase_ms_median"]["grad_norm_ms"], 1.5)
        check("full: optimizer_ms", s["phase_ms_median"]["optimizer_ms"], 14.0)
        check("full: step_ms", s["phase_ms_median"]["step_ms"], 79.0)
        check("full: measured peak GiB", s["memory"]["measured_peak_gib"], PLAN_GIB + 0.75)
        check("full: plan peak GiB", s["memory"]["plan_peak_gib"], PLAN_GIB)
        check("full: peak - plan GiB", s["memory"]["diff_gib"], 0.75)
        check("full: tokens/s target", s["targets"]["tokens_per_sec_at_least_100k"]["pass"], True)
        check("full: memory target", s["targets"]["peak_within_1_gib_of_plan"]["pass"], True)
        check("full: recompute (plan.json without the key: a run before train.recompute)", s["recompute"], "block")
        check("full: plan activations GiB", s["plan_activations_gib"], 2698643968 / 2**30)
        # plan == measured: the plan's device total (arena + the 0.77 GiB constant) and the start-up measurement
        const = int(0.77 * 2**30) / 2**30
        check("full: plan device total GiB", s["memory"]["plan_device_total_gib"], PLAN_GIB + const)
        check("full: overhead measured at start-up GiB", s["memory"]["device_overhead_gib"], int(0.70 * 2**30) / 2**30)
        check("full: overhead constant GiB", s["memory"]["device_overhead_constant_gib"], const)
        check("full: peak - plan device total GiB", s["memory"]["diff_device_total_gib"], 0.75 - const)
        check("full: device total target", s["targets"]["peak_within_0_25_gib_of_plan_device_total"]["pass"], True)

    # 1b. a run with train.recompute none: the mode from plan.json
    d = copy_fixture(tmp, "recompute_none")
    with open(os.path.join(d, "plan.json")) as f:
        plan = json.load(f)
    plan["recompute"] = "none"
    with open(os.path.join(d, "plan.json"), "w") as f:
        json.dump(plan, f)
    rc, s = run(d)
    check("recompute none: exit", rc, 0)
    if s:
        check("recompute none: mode", s["recompute"], "none")

    # 2. a trainer without phase timing, no plan.json: phases null, active parameters from the config
    d = copy_fixture(tmp, "no_phases")
    os.remove(os.path.join(d, "plan.json"))
    path = os.path.join(d, "steps_skewadam.jsonl")
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    with open(path, "w") as f:
        for r in lines:
            for k in ("fwd_bwd_ms", "grad_norm_ms", "optimizer_ms", "step_ms"):
                r.pop(k, None)
            f.write(json.dumps(r) + "\n")
        f.write('{"step": 13, "tokens_per')  # the partial last line a killed run may leave
    rc, s = run(d)
    check("no phases: exit", rc, 0)
    if s:
        check("no phases: median tokens/s", s["tokens_per_sec_median"], 100500.0)
        check("no phases: active parameters from the config", s["active_params_per_token"], ACTIVE)
        for k in ("fwd_bwd_ms", "grad_norm_ms", "optimizer_ms", "step_ms"):
            check(f"no phases: {k}", s["phase_ms_median"][k], None)
        check("no phases: microbatch from the config", s["microbatch"], 64)

    # 3. killed before the evaluation: no metrics; the peak comes from the log, no active parameters
    #    without plan.json or config, so no MFU; slower than the target
    d = copy_fixture(tmp, "no_metrics")
    os.remove(os.path.join(d, "metrics_skewadam.json"))
    os.remove(os.path.join(d, "plan.json"))
    rc, s = run(d, "--warmup", "0")
    check("no metrics: exit", rc, 0)
    if s:
        check("no metrics: steps measured", s["steps_measured"], 11)
        check("no metrics: median tokens/s", s["tokens_per_sec_median"], 100000.0)
        check("no metrics: measured peak from the log", s["memory"]["measured_peak_gib"], 30.075)
        check("no metrics: plan peak from the log", s["memory"]["plan_peak_gib"], 29.325)
        check("no metrics: diff from the log", s["memory"]["diff_gib"], 0.75)
        check("no metrics: MFU unknown", s["mfu"], None)
        check("no metrics: tokens/s target", s["targets"]["tokens_per_sec_at_least_100k"]["pass"], True)

    # 4. no step log at all: exit 1
    d = os.path.join(tmp, "empty")
    os.makedirs(d)
    rc, s = run(d)
    check("empty: exit", rc, 1)

for f in failures:
    print("FAIL", f)
print(f"test_summarize_gpu_train: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
