#!/usr/bin/env bash
# Compile CUDA sources for sm_90a (or each architecture of --arch) with `nvcc -Xptxas -v` and fail
# unless every kernel reports "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" (no
# local memory: no runtime-indexed arrays, no spills); then fail unless the PTX of each named kernel
# uses 16-byte global accesses (ld/st.global...v4). FILE.cu%NAME checks only the kernels whose
# mangled name contains NAME.
# Usage: check_ptxas.sh NVCC SOURCE_ROOT [--arch sm_80,sm_90a] FILE.cu[%NAME][:kernel,kernel...] ...
set -euo pipefail
nvcc=$1 root=$2
shift 2
archs=sm_90a
if [[ "${1:-}" == --arch ]]; then archs=$2; shift 2; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
IFS=, read -ra arch_list <<< "$archs"
for spec in "$@"; do
    file=${spec%%:*}
    kernels=""
    [[ "$spec" == *:* ]] && kernels=${spec#*:}
    only=""
    [[ "$file" == *%* ]] && { only=${file#*%}; file=${file%%%*}; }
    for arch in "${arch_list[@]}"; do
        log="$tmp/$(basename "$file").$arch.log"
        "$nvcc" -std=c++20 -arch="$arch" -I"$root" --expt-relaxed-constexpr -Xptxas -v -c "$root/$file" -o "$tmp/x.o" > "$log" 2>&1 || {
            cat "$log"; echo "check_ptxas: $file does not compile for $arch"; exit 1; }
        # one line per kernel: its name, then its frame and spills
        grep -A1 "Function properties for" "$log" | grep -v "^--" | paste - - | grep -F -- "$only" > "$tmp/props" || true
        entries=$(wc -l < "$tmp/props")
        clean=$(grep -c "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" "$tmp/props" || true)
        what="$file${only:+ (kernels named *$only*)} for $arch"
        if [[ "$entries" -eq 0 || "$entries" -ne "$clean" ]]; then
            grep -v " 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" "$tmp/props" || true
            echo "check_ptxas: $what: $clean of $entries kernels without stack frame or spills"
            status=1
        else
            echo "check_ptxas: $what: $entries kernels, no stack frame, no spills"
        fi
    done
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
