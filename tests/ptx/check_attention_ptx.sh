#!/usr/bin/env bash
# The tensor-core attention kernels (kernels/cuda/attention_mma.cuh) compile for sm_90a to
# mma.sync m16n8k16 bf16 and ldmatrix, with no local memory: no .local in their PTX, and ptxas
# reports 0 bytes of stack frame and of spills for each of them. Exits 77 (skipped) without nvcc.
# Usage: check_attention_ptx.sh NVCC SOURCE_DIR WORK_DIR
set -euo pipefail
nvcc="${1:-}" src="${2:?source dir}" work="${3:?work dir}"
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
    echo "nvcc not found: skipped"
    exit 77
fi
ptxas="$(dirname "$nvcc")/ptxas"
mkdir -p "$work"
ptx="$work/attention_mma.ptx"
"$nvcc" -std=c++20 -arch=sm_90a -O3 --expt-relaxed-constexpr -I"$src" -ptx "$src/kernels/cuda/attention_mma.cu" -o "$ptx"
fail=0
# Split the PTX into its kernels (.entry ... up to the next .entry) and check each attention kernel.
entries=$(grep -oE '^\.visible \.entry [A-Za-z0-9_]+|^\.entry [A-Za-z0-9_]+' "$ptx" | awk '{print $NF}' | grep '_mma_kernel' || true)
n=$(echo "$entries" | grep -c . || true)
if [[ "$n" -ne 20 ]]; then  # (forward, dQ) x key tile 32, 64 and dK/dV, x head_dim 16, 32, 64, 128
    echo "FAIL: expected 20 attention tensor-core kernels in the PTX, found $n"
    fail=1
fi
for e in $entries; do
    body=$(awk -v name="$e" '$0 ~ "\\.entry " name "\\(" || $0 ~ "\\.entry " name "$" {on=1} on && /^\.(visible )?\.entry / && $0 !~ name {on=0} on {print}' "$ptx")
    mma=$(grep -c 'mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32' <<<"$body" || true)
    ldm=$(grep -c 'ldmatrix.sync.aligned.m8n8.x4' <<<"$body" || true)
    loc=$(grep -c '\.local' <<<"$body" || true)
    echo "$e: mma.sync m16n8k16 x$mma, ldmatrix x$ldm, .local x$loc"
    if [[ "$mma" -eq 0 || "$ldm" -eq 0 || "$loc" -ne 0 ]]; then
        echo "FAIL: $e"
        fail=1
    fi
done
# ptxas: registers, stack frame and spills per kernel.
"$ptxas" -arch=sm_90a -O3 -v "$ptx" -o "$work/attention_mma.cubin" 2>"$work/ptxas.log"
awk '/Function properties for/ {name=$NF} /stack frame/ {print name": "$0} /Used [0-9]+ registers/ {print name": "$0}' "$work/ptxas.log" | grep '_mma_kernel' || true
bad=$(awk '/Function properties for/ {name=$NF} /stack frame/ && name ~ /_mma_kernel/ && ($1 != 0 || $5 != 0 || $9 != 0) {print name}' "$work/ptxas.log")
if [[ -n "$bad" ]]; then
    echo "FAIL: stack frame or spills in: $bad"
    fail=1
fi
if [[ "$fail" -ne 0 ]]; then exit 1; fi
echo "OK: every attention tensor-core kernel uses mma.sync m16n8k16 and ldmatrix, no local memory, no spills"
