#!/usr/bin/env bash
# A snapshot of what skew computes, for refactors that must not change it (docs/architecture.md,
# "Changing the structure"): every `skew plan` output (3 configs x 11 optimizers x 7 option sets,
# text and --json) and the per-step losses of short CPU training runs (every optimizer, and the
# expert-gradient, idle-expert, recompute, gradient-dtype and accumulation choices; configs/olmoe-tiny.yaml
# and a Qwen3-shaped variant of it), timings dropped; and `skew sample` (greedy, KV cache) from the
# checkpoints of the tiny, olmoe-tiny and Qwen3-shaped runs on a few prompts.
#   bash scripts/behaviour_snapshot.sh SKEW_BINARY OUT_DIR     then     diff -r OUT_A OUT_B
# Training reads data/prepared/quickstart (scripts/quickstart.sh or skew prepare makes it).
set -euo pipefail
skew="$(realpath "$1")"; out="$2"
cd "$(dirname "$0")/.."
mkdir -p "$out/plan" "$out/train" "$out/sample"
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
# olmoe-tiny made Qwen3-shaped (docs/architectures.md): GQA 4/2, head_dim 48 != d_model / n_heads, QK-norm
# per head, q/k/v biases, top-8 renormalized, one shared expert behind the sigmoid gate, RoPE theta 1e6,
# the untied head
qwen3="--set model.n_kv_heads=2 --set model.head_dim=48 --set model.qk_norm=per_head --set model.attention_bias=true \
--set model.normalize_top_k=true --set model.n_shared_experts=1 --set model.d_shared_expert=96 \
--set model.shared_expert_gate=sigmoid --set model.rope_theta=1000000"
runs=("tiny|skewadam adamw lion muon adafactor galore-paper muon-kj|"
      "tiny|skewadam adamw muon|--set train.expert_grads=deferred"
      "tiny|skewadam adamw|--set train.idle_experts=step"
      "tiny|skewadam lion|--set train.recompute=none"
      "tiny|skewadam adamw|--set train.recompute=attention"
      "tiny|skewadam adamw muon|--set runtime.grad_dtype=fp32"
      "tiny|skewadam adamw|--set train.microbatch=2 --set train.expert_grads=deferred"
      "olmoe-tiny|skewadam adamw adafactor|"
      "olmoe-tiny|skewadam adamw|$qwen3")
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
for i in "${!runs[@]}"; do
  IFS='|' read -r cfg opts sets <<<"${runs[$i]}"
  # shellcheck disable=SC2086
  "$skew" train "configs/$cfg.yaml" --plain --out "$work/run$i" --optimizers "${opts// /,}" \
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
# Decoding (prefill + one token at a time through the KV cache) from each run's last checkpoint:
# tiny (run 0), olmoe-tiny and the Qwen3-shaped variant (the last two runs), greedy and drawn
# (temperature 1, top-k 50, a fixed seed: a 6-step model's greedy text repeats one token, its draws
# vary with every logit); the checkpoint's path and the speed dropped.
prompts=("The history of" "Once upon a time, there was a" "In 1987 the committee")
draws=("--temperature 0" "--temperature 1 --top-k 50 --num-samples 2")
for i in 0 $((${#runs[@]} - 2)) $((${#runs[@]} - 1)); do
  for p in "${!prompts[@]}"; do
    for d in "${!draws[@]}"; do
      # shellcheck disable=SC2086
      "$skew" sample "$work/run$i" --optimizer skewadam --which last --prompt "${prompts[$p]}" --max-tokens 48 \
        ${draws[$d]} --seed 7 --backend cpu --json 2>"$work/sample.err" \
        | python3 -c 'import json, sys; r = json.load(sys.stdin); [r.pop(k) for k in ("checkpoint", "decode_tokens_per_sec")]; print(json.dumps(r, sort_keys=True))' \
        >"$out/sample/run${i}_prompt${p}_draw$d.json" || { echo "sample of run $i failed:"; tail -5 "$work/sample.err"; exit 1; }
    done
  done
done
echo "snapshot: $(ls "$out/plan" | wc -l) plan outputs, $(ls "$out/train" | wc -l) training logs, $(ls "$out/sample" | wc -l) samples in $out"
