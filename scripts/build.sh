#!/usr/bin/env bash
# Configure and build skew into build/ (Release). Extra arguments go to cmake's configure step,
# e.g. -DSKEW_CUDA=OFF or -DCMAKE_CUDA_ARCHITECTURES=90a.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
