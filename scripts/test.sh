#!/usr/bin/env bash
# README's test command: install dependencies, build, run every CPU test (GPU tests skip themselves
# when no GPU is present). ctest prints its summary last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
