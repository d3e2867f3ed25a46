#!/usr/bin/env bash
# The tier experiment of docs/architectures.md on the CPU: configs/olmoe-tiny.yaml (every block an
# MoE, top-8 of 64) trained with SkewAdam, AdamW and Adafactor from one initialization on identical
# batches (run 1), then the same model with one gated shared expert, trained by SkewAdam with the shared
# expert in the backbone's momentum tier (the default) and in the routed experts' tier (run 2).
# Needs data/prepared/quickstart (scripts/quickstart.sh, or scripts/fetch_data.sh and `skew prepare`).
# Usage: bash scripts/tier_experiment.sh [OUT_DIR, default runs/tier-experiment]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/tier-experiment}
skew=./build/tools/skew
"$skew" train configs/olmoe-tiny.yaml --plain --out "$out/olmoe-tiny" --optimizers skewadam,adamw,adafactor
"$skew" train configs/olmoe-tiny.yaml --plain --out "$out/olmoe-tiny-shared" \
    --set model.n_shared_experts=1 --set model.d_shared_expert=256 --set model.shared_expert_gate=sigmoid \
    --set optimizers.skewadam-shared-in-expert-tier.type=skewadam \
    --set optimizers.skewadam-shared-in-expert-tier.lr=5.0e-3 \
    --set optimizers.skewadam-shared-in-expert-tier.tiers.shared_experts.momentum=none \
    --optimizers skewadam,skewadam-shared-in-expert-tier
"$skew" report "$out/olmoe-tiny"
"$skew" report "$out/olmoe-tiny-shared"
