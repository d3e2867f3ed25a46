#!/usr/bin/env bash
# A snapshot of what skew computes, for refactors that must not change it (docs/architecture.md,
# "Changing the structure"): every `skew plan` output (3 configs x 11 optimizers x 7 option sets,
# text and --json) and the per-step losses of short CPU training runs (every optimizer, and the
# expert-gradient, idle-expert, recompute, gradient-dtype and accumulation choices), timings dropped.
#   bash scripts/behaviour_snapshot.sh SKEW_BINARY OUT_DIR     then     diff -r OUT_A OUT_B
# Training reads data/prepared/quickstart (scripts/quickstart.sh or skew prepare makes it).
set -euo pipefail
skew="$(realpath "$1")"; out="$2"
cd "$(dirname "$0")/.."
mkdir -p "$out/plan" "$out/train"
optimizers="skewadam adamw muon lion adafactor galore-paper galore skewadam-expert-momentum skewadam-factored-router uniform muon-kj"
modes=("" "--microbatch 2" "--budget 40GiB" "--world-size 4" "--world-size 4 --expert-parallel 2"
       "--set train.expert_grads=deferred" "--set train.recompute=none --set runtime.grad_dtype=fp32")
for cfg in configs/tiny.yaml configs/quickstart.yaml configs/paper-6.78b.yaml; do
  for opt in $optimizers; do
    for i in "${!modes[@]}"; do
      base="$out/plan/$(basename "$cfg" .yaml)_${opt}_$i"
      # shellcheck disable=SC2086
      "$skew" plan "$cfg" --optimizer "$opt" ${modes[$i]} >"$base.txt" 2>&1 || echo "exit $?" >>"$base.txt"
      # shellcheck disable=SC2086
      "$skew" plan "$cfg" --optimizer "$opt" ${modes[$i]} --json >"$base.json" 2>&1 || echo "exit $?" >>"$base.json"
    done
  done
done
runs=("skewadam adamw lion muon adafactor galore-paper muon-kj|"
      "skewadam adamw muon|--set train.expert_grads=deferred"
      "skewadam adamw|--set train.idle_experts=step"
      "skewadam lion|--set train.recompute=none"
      "skewadam adamw|--set train.recompute=attention"
      "skewadam adamw muon|--set runtime.grad_dtype=fp32"
      "skewadam adamw|--set train.microbatch=2 --set train.expert_grads=deferred")
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
for i in "${!runs[@]}"; do
  opts="${runs[$i]%%|*}"; sets="${runs[$i]#*|}"
  # shellcheck disable=SC2086
  "$skew" train configs/tiny.yaml --plain --out "$work/run$i" --optimizers "${opts// /,}" \
    --set train.steps=6 --set train.eval_every=3 --set train.checkpoint_every=1000 --set runtime.threads=1 $sets \
    >"$work/log$i.txt" 2>&1 || { echo "run $i failed:"; tail -5 "$work/log$i.txt"; exit 1; }
  for f in "$work/run$i"/steps_*.jsonl; do
    python3 - "$f" >"$out/train/run${i}_$(basename "$f" .jsonl).txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print({k: v for k, v in r.items() if not (k.endswith("_ms") or "per_sec" in k or k in ("wall_s", "time", "elapsed_s"))})
PY
  done
done
echo "snapshot: $(ls "$out/plan" | wc -l) plan outputs, $(ls "$out/train" | wc -l) training logs in $out"
