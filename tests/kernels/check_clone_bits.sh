#!/usr/bin/env bash
# tests/kernels/clone_bits.cpp built for baseline x86-64, AVX2 and AVX-512 must print the same
# hashes. Usage: check_clone_bits.sh BASELINE AVX2 AVX512. Exits 77 (skipped) on a processor
# without AVX-512 or AVX2, where the wider builds cannot run.
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
for f in avx2 avx512f; do
    if ! grep -qw "$f" <<<"$flags"; then echo "skipped: this processor lacks $f"; exit 77; fi
done
base=$("$1"); avx2=$("$2"); avx512=$("$3")
echo "$base"
if [ "$base" != "$avx2" ] || [ "$base" != "$avx512" ]; then
    echo "the clones differ:"; diff <(echo "$base") <(echo "$avx2") || true; diff <(echo "$base") <(echo "$avx512") || true
    exit 1
fi
echo "baseline, AVX2 and AVX-512 builds agree bit for bit"
