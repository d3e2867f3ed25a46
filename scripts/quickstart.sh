#!/usr/bin/env bash
# README's first command: install dependencies, build skew, and run the main job.
# Today the main job is the memory-budget dry run of the paper's 6.78B model on a 40 GiB device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/tools/skew plan configs/paper-6.78b.yaml --budget 40GiB
