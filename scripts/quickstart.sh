#!/usr/bin/env bash
# README's first command: install dependencies, build skew, fetch the GPT-2 tokenizer and a real
# English corpus, tokenize it, and train the quickstart MoE with SkewAdam, AdamW, Lion and Muon from
# one initialization on identical batches (CPU), then print the paper's Table 1 for the run and
# draw its figures. Also prints the memory-budget dry run of the paper's 6.78B model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/tools/skew plan configs/paper-6.78b.yaml --budget 40GiB
bash scripts/fetch_data.sh
# Prepare unless a complete dataset is there (a manifest, and no temporary of an interrupted prepare).
if [ ! -f data/prepared/quickstart/manifest.json ] || compgen -G 'data/prepared/quickstart/.*.tmp-*' >/dev/null; then
  ./build/tools/skew prepare --input data/corpus --out data/prepared/quickstart --tokenizer data/tokenizer
fi
# runs/quickstart, or a new runs/quickstart-N when that folder holds a run of another config or version.
run=$(bash scripts/run_folder_for.sh ./build/tools/skew configs/quickstart.yaml runs/quickstart)
if [ "$run" != runs/quickstart ] && [ ! -e "$run" ]; then
  echo "quickstart: starting a fresh run in $run" >&2
fi
if [ -f "$run/config.yaml" ]; then
  ./build/tools/skew train --resume "$run"   # continues (or reports) an earlier quickstart run
else
  ./build/tools/skew train configs/quickstart.yaml --out "$run"
fi
./build/tools/skew report "$run" | tee "$run/report.md"
python3_bin=/usr/bin/python3; [ -x "$python3_bin" ] || python3_bin=python3
"$python3_bin" tools/plot_metrics.py "$run" || echo "quickstart: plotting skipped (python3-matplotlib missing?)"
echo "quickstart: done; run folder $run (metrics_*.json, steps_*.jsonl, checkpoints/, *.png)"
