#!/usr/bin/env python3
"""Summarize the whole-step GPU training benchmark of bench/gpu_check.sh (targets).

gpu_check.sh runs `skew train configs/paper-6.78b.yaml` on the CUDA backend for a few steps and
copies into $OUT/train: steps_<opt>.jsonl (every step), metrics_<opt>.json (written at the one
evaluation: measured peak device memory, the plan's predicted peak, the resolved config),
plan.json (`skew plan --json` of the same run), train.log (the trainer's log) and info.txt
(commit, device). This script reads that folder on the development machine and writes one JSON:

  tokens/s     median of the steps' tokens_per_sec, the first --warmup (2) steps and skipped
               steps left out
  MFU          6 x active parameters per token x tokens/s / peak FLOP/s (H200 dense bf16: 989e12);
               active parameters = plan.json's params.active_per_token (ParamTable::active_numel:
               every backbone and router parameter except the position embedding, which is a
               lookup, plus top_k / n_experts of the expert parameters); without plan.json the
               same sum is computed from the config in metrics_<opt>.json. Attention's
               score/value FLOPs are not counted (the usual 6N convention).
  phases       median of fwd_bwd_ms, grad_norm_ms, optimizer_ms, step_ms over the same steps,
               where the step log has them (null otherwise)
  recompute    train.recompute of the run (plan.json's recompute, else the config's, else "block":
               runs before the key existed), with plan.json's activation bytes of that mode
  memory       metrics' peak_memory_bytes (device memory in use, whole device) against
               plan_peak_bytes (the arena) and plan_bytes (the arena plus skew plan's CUDA context and
               libraries constant; device_overhead_bytes: that overhead measured at start-up); without metrics, the trainer's last log line that reports them
  targets      tokens/s >= 100,000 and |measured peak - plan| <= 1 GiB (docs/design.md, "Targets on a
               GPU"); pass is null when the number is missing

Usage: bench/summarize_gpu_train.py TRAIN_DIR [--out FILE] [--optimizer skewadam] [--warmup 2]
           [--peak-flops 989e12] [--commit C] [--device D]
Python 3 standard library only. Exit 0 when a summary was written (whatever the targets say),
1 when TRAIN_DIR holds no step log.
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

GIB = float(1 << 30)
H200_BF16_DENSE_FLOPS = 989e12
TARGET_TOKENS_PER_SEC = 100_000
TARGET_PEAK_DIFF_GIB = 1.0
TARGET_DEVICE_TOTAL_DIFF_GIB = 0.25  # measured peak vs the plan with the CUDA context and libraries
PHASES = ("fwd_bwd_ms", "grad_norm_ms", "optimizer_ms", "step_ms")


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_steps(path):
    """Every complete JSON line of a step log (a partial last line, as a killed run leaves, is ignored)."""
    steps = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                steps.append(json.loads(line))
            except ValueError:
                continue
    return steps


def read_info(path):
    """key: value lines (info.txt written by gpu_check.sh)."""
    info = {}
    try:
        with open(path) as f:
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    info[k.strip()] = v.strip()
    except OSError:
        pass
    return info


def number(x):
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def median_of(records, key):
    vals = [number(r.get(key)) for r in records]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def active_params_from_config(model):
    """ParamTable::active_numel for a model config (engine/param_table.cpp): backbone and router
    parameters except the position embedding, plus top_k / n_experts of each expert tensor."""
    d = model["d_model"]
    hd = d // model["n_heads"]
    q_out = model["n_heads"] * hd
    kv_out = model["n_kv_heads"] * hd
    moe = set(model.get("moe_blocks", []))
    n = model["padded_vocab_size"] * d  # tied token embedding / LM head
    for b in range(model["n_blocks"]):
        n += 4 * d  # ln1, ln2 weight and bias
        n += q_out * d + 2 * kv_out * d + d * q_out  # wq, wk, wv, wo
        if b in moe:
            e, h = model["n_experts"], model["d_expert"]
            n += e * d  # router
            n += 3 * (e * h * d // e) * model["top_k"]  # w1, w2, w3: top_k of the n_experts
        else:
            n += 3 * model["d_ff"] * d
    n += 2 * d  # final LayerNorm
    return n


def memory_from_log(log_path):
    """(measured GiB, plan GiB) from the trainer's 'measured peak device memory X GiB (whole device),
    plan Y GiB' line, or (None, None)."""
    pat = re.compile(r"measured peak device memory ([0-9.]+) GiB .*plan ([0-9.]+) GiB")
    found = (None, None)
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                m = pat.search(line)
                if m:
                    found = (float(m.group(1)), float(m.group(2)))
    except OSError:
        pass
    return found


def summarize(train_dir, optimizer="skewadam", warmup=2, peak_flops=H200_BF16_DENSE_FLOPS, commit=None, device=None):
    steps_path = os.path.join(train_dir, f"steps_{optimizer}.jsonl")
    if not os.path.exists(steps_path):
        found = sorted(glob.glob(os.path.join(train_dir, "steps_*.jsonl")))
        if not found:
            raise FileNotFoundError(f"{train_dir}: no steps_{optimizer}.jsonl (did the training run start?)")
        steps_path = found[0]
        optimizer = os.path.basename(steps_path)[len("steps_"):-len(".jsonl")]
    steps = read_steps(steps_path)
    metrics = read_json(os.path.join(train_dir, f"metrics_{optimizer}.json"))
    plan = read_json(os.path.join(train_dir, "plan.json"))
    info = read_info(os.path.join(train_dir, "info.txt"))
    cfg = (metrics or {}).get("config") or {}
    train_cfg = cfg.get("train", {})

    measured = [s for s in steps if number(s.get("step")) is not None and s["step"] > warmup]
    skipped = [s for s in measured if s.get("skipped")]
    measured = [s for s in measured if not s.get("skipped")]
    tps = [number(s.get("tokens_per_sec")) for s in measured]
    tps = [v for v in tps if v is not None]
    tokens_per_sec = statistics.median(tps) if tps else None

    active, active_source = None, None
    if plan and number((plan.get("params") or {}).get("active_per_token")):
        active, active_source = plan["params"]["active_per_token"], "plan.json params.active_per_token"
    elif cfg.get("model"):
        active, active_source = active_params_from_config(cfg["model"]), "computed from metrics config (ParamTable::active_numel)"
    flops_per_token = 6 * active if active else None
    mfu = flops_per_token * tokens_per_sec / peak_flops if flops_per_token and tokens_per_sec else None

    mem = {"source": None, "measured_peak_gib": None, "plan_peak_gib": None, "diff_gib": None}
    if metrics and number(metrics.get("peak_memory_bytes")) and number(metrics.get("plan_peak_bytes")):
        mem.update(source=f"metrics_{optimizer}.json peak_memory_bytes vs plan_peak_bytes",
                   measured_peak_gib=metrics["peak_memory_bytes"] / GIB, plan_peak_gib=metrics["plan_peak_bytes"] / GIB)
    else:
        got, planned = memory_from_log(os.path.join(train_dir, "train.log"))
        if got is not None:
            mem.update(source="train.log 'measured peak device memory'", measured_peak_gib=got, plan_peak_gib=planned)
    if mem["plan_peak_gib"] is None and plan and number((plan.get("peak") or {}).get("gib")):
        mem["plan_peak_gib"] = plan["peak"]["gib"]
    if mem["measured_peak_gib"] is not None and mem["plan_peak_gib"] is not None:
        mem["diff_gib"] = mem["measured_peak_gib"] - mem["plan_peak_gib"]
    # plan == measured: the plan's device total (arena + skew plan's CUDA constant, metrics plan_bytes)
    # against the measured peak, and the context and libraries measured at start-up next to the constant
    mem.update(plan_device_total_gib=None, device_overhead_gib=None, device_overhead_constant_gib=None,
               diff_device_total_gib=None)
    if metrics and number(metrics.get("plan_bytes")) and number(metrics.get("device_overhead_constant_bytes")):
        mem["plan_device_total_gib"] = metrics["plan_bytes"] / GIB
        mem["device_overhead_constant_gib"] = metrics["device_overhead_constant_bytes"] / GIB
    if metrics and number(metrics.get("device_overhead_bytes")) is not None:
        mem["device_overhead_gib"] = metrics["device_overhead_bytes"] / GIB
    if mem["measured_peak_gib"] is not None and mem["plan_device_total_gib"] is not None:
        mem["diff_device_total_gib"] = mem["measured_peak_gib"] - mem["plan_device_total_gib"]

    def target(value, ok):
        return {"value": value, "pass": None if value is None else ok(value)}

    recompute = (plan or {}).get("recompute") or train_cfg.get("recompute") or "block"
    activations = number(((plan or {}).get("activations") or {}).get("gib"))
    batch = number(train_cfg.get("batch_size"))
    microbatch = (plan or {}).get("microbatch") or number(train_cfg.get("microbatch"))  # the plan's is resolved (0 = auto)
    return {
        "bench": "gpu_train_step",
        "commit": commit or info.get("commit") or None,
        "device": device or info.get("device") or None,  # info.txt has an empty device without nvidia-smi
        "config": info.get("config") or (plan or {}).get("config"),
        "optimizer": optimizer,
        "batch_size": batch,
        "seq_len": number(train_cfg.get("seq_len")) or (plan or {}).get("seq_len"),
        "microbatch": microbatch,
        "grad_accum_steps": (batch // microbatch) if batch and microbatch else (plan or {}).get("grad_accum_steps"),
        "recompute": recompute,
        "plan_activations_gib": activations,
        "steps_logged": len(steps),
        "warmup_steps_excluded": warmup,
        "steps_measured": len(measured),
        "skipped_steps_excluded": len(skipped),
        "tokens_per_sec_median": tokens_per_sec,
        "tokens_per_sec_min": min(tps) if tps else None,
        "tokens_per_sec_max": max(tps) if tps else None,
        "active_params_per_token": active,
        "active_params_source": active_source,
        "flops_per_token": flops_per_token,
        "peak_flops": peak_flops,
        "mfu": mfu,
        "phase_ms_median": {k: median_of(measured, k) for k in PHASES},
        "memory": mem,
        "targets": {
            "tokens_per_sec_at_least_100k": target(tokens_per_sec, lambda v: v >= TARGET_TOKENS_PER_SEC),
            "peak_within_1_gib_of_plan": target(mem["diff_gib"], lambda v: abs(v) <= TARGET_PEAK_DIFF_GIB),
            "peak_within_0_25_gib_of_plan_device_total": target(
                mem["diff_device_total_gib"], lambda v: abs(v) <= TARGET_DEVICE_TOTAL_DIFF_GIB),
        },
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train_dir", help="$OUT/train of a gpu_check.sh run")
    ap.add_argument("--out", help="write the JSON here (default: stdout only)")
    ap.add_argument("--optimizer", default="skewadam")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians")
    ap.add_argument("--peak-flops", type=float, default=H200_BF16_DENSE_FLOPS, help="device peak FLOP/s for MFU")
    ap.add_argument("--commit")
    ap.add_argument("--device")
    a = ap.parse_args(argv)
    try:
        s = summarize(a.train_dir, a.optimizer, a.warmup, a.peak_flops, a.commit, a.device)
    except FileNotFoundError as e:
        print(f"summarize_gpu_train: {e}", file=sys.stderr)
        return 1
    text = json.dumps(s, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
