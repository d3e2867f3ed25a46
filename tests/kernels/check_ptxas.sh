#!/usr/bin/env bash
# Compile CUDA sources for sm_90a with `nvcc -Xptxas -v` and fail unless every kernel reports
# "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" (no local memory: no runtime-indexed
# arrays, no spills); then fail unless the PTX of each named kernel uses 16-byte global accesses
# (ld/st.global...v4). Usage: check_ptxas.sh NVCC SOURCE_ROOT FILE.cu[:kernel,kernel...] ...
set -euo pipefail
nvcc=$1 root=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for spec in "$@"; do
    file=${spec%%:*}
    kernels=""
    [[ "$spec" == *:* ]] && kernels=${spec#*:}
    log="$tmp/$(basename "$file").log"
    "$nvcc" -std=c++20 -arch=sm_90a -I"$root" --expt-relaxed-constexpr -Xptxas -v -c "$root/$file" -o "$tmp/x.o" > "$log" 2>&1 || {
        cat "$log"; echo "check_ptxas: $file does not compile"; exit 1; }
    entries=$(grep -c "Function properties for" "$log" || true)
    clean=$(grep -c "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" "$log" || true)
    if [[ "$entries" -eq 0 || "$entries" -ne "$clean" ]]; then
        grep -A1 "Function properties" "$log" | grep -v "^--" | paste - - | grep -v " 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" || true
        echo "check_ptxas: $file: $clean of $entries kernels without stack frame or spills"
        status=1
    else
        echo "check_ptxas: $file: $entries kernels, no stack frame, no spills"
    fi
    if [[ -n "$kernels" ]]; then
        "$nvcc" -std=c++20 -arch=sm_90a -I"$root" --expt-relaxed-constexpr -ptx "$root/$file" -o "$tmp/x.ptx"
        IFS=, read -ra names <<< "$kernels"
        for k in "${names[@]}"; do
            n=$(awk -v k="$k" '/^\.(visible )?\.?entry/ {inside = index($0, k) > 0} inside && /(ld|st)\.global[^ ]*\.v4/ {c++} END {print c + 0}' "$tmp/x.ptx")
            if [[ "$n" -eq 0 ]]; then
                echo "check_ptxas: $file: no 16-byte global access in kernel $k"
                status=1
            else
                echo "check_ptxas: $file: $k: $n 16-byte global accesses"
            fi
        done
    fi
done
exit $status
