#!/usr/bin/env bash
# The unit tests once more under AddressSanitizer + UndefinedBehaviorSanitizer (CI's second build):
# a CPU-only build (-DSKEW_SANITIZE=ON -DSKEW_CUDA=OFF) in build-asan/, then every ctest but the GPU
# tests. A sanitized build leaves out the benchmarks, the end-to-end `skew train` runs (label trainer,
# run by scripts/test.sh; tens of minutes under the sanitizers on 2 cores), the multi-rank runs under
# mpirun (label dist, also run by scripts/test.sh: LeakSanitizer reports what Open MPI's own
# initialization keeps until exit) and the nvcc-only checks (tests/CMakeLists.txt). Compiled at -O1
# (AddressSanitizer's advice; the build takes about half the time of -O2 with full debug
# information) with line tables (-g1). Any sanitizer report fails the test that made it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
      -DSKEW_CUDA=OFF -DSKEW_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# Also left to scripts/test.sh (which runs them unsanitized): the two 20-step deferred-expert
# comparisons, the longest unit tests (40-60 s each unsanitized); the other deferred-expert tests
# (one step of every optimizer, idle experts, the norm, accumulation) run here.
slow="deferred expert gradients equal the stored mode over 20 steps|deferred expert gradients with bf16 gradient storage track"
cd build-asan
ctest --output-on-failure -j"$(nproc)" -LE "gpu|trainer|dist" -E "$slow" "$@"
