#!/usr/bin/env bash
# bench/gpu_carry.sh: the carry of the GPU check (docs/gpu-status.md, "Running the GPU check"): the
# binaries built here, every shared library they need that the GPU image lacks, a relocatable Open
# MPI (the image has none; the `mpirun -np 1` NCCL tests need it) and the training benchmark's
# shards, staged in one folder the device tool takes along (at most 64 MiB with the working tree).
# Sourced by bench/gpu_check.sh; also a command:
#
#   bench/gpu_carry.sh stage BUILD_DIR CARRY_DIR DATA_DIR   stage (then check) a carry
#   bench/gpu_carry.sh check CARRY_DIR                      size and library check; exit 1 naming the problem
#   bench/gpu_carry.sh matches CARRY_DIR                    whether the carry was built from this tree (commit
#                                                           and the scripts' and configs' contents); exit 1 if not
#
# The GPU image (docs/gpu-status.md) provides only: the C and C++ runtimes, the NVIDIA driver,
# cuBLAS/cuBLASLt and the CUDA runtime (toolkit and pip), NCCL (pip nvidia-nccl-cu13; loaded by skew
# at run time, never linked). Every other library a carried binary or Open MPI component needs must
# be in the carry: `check` reads each ELF file's DT_NEEDED entries and fails naming the file and the
# library that is neither carried nor one of those.

CARRY_MAX_MIB=${CARRY_MAX_MIB:-60}  # the device tool carries 64 MiB with the working tree
# Sonames the GPU image has (glibc, libstdc++, the driver, the CUDA libraries, NCCL).
CARRY_IMAGE_LIBS='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libutil\.so\.1|libresolv\.so\.2|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libcuda\.so\.1|libcudart\.so\.13|libcublas\.so\.13|libcublasLt\.so\.13|libnccl\.so\.2|libnvidia-[a-z-]+\.so\.1)$'
# Open MPI components that need libraries of networks a single machine does not use (UCX, PSM,
# verbs, libfabric, munge) or OpenSHMEM: left out (Open MPI runs without them).
CARRY_SKIP_COMPONENTS='libuc[pstm]\.|libpsm|libibverbs|librdmacm|libfabric|libefa|libmunge|liboshmem|libinfinipath|libnl-|libmca_common_(ucx|ofi|verbs)'
CARRY_BINARIES=(tools/skew tests/test_gpu bench/bench_gpu_ops tests/backend_ops/backend_ops)
CARRY_OMPI_PKGLIB=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
CARRY_PMIX_LIB=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix

carry_say() { echo "gpu_carry: $*" >&2; }

# carry_needed FILE: the sonames FILE needs (DT_NEEDED), one per line.
carry_needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# carry_unpack PAYLOAD DIR: unpack payload.tar.xz into DIR with tar and xz, or with Python's tarfile
# and lzma where xz is not installed (the GPU image need not have it) or SKEW_CARRY_UNPACK=python.
carry_unpack() {
    if [[ "${SKEW_CARRY_UNPACK:-}" != python ]] && command -v xz >/dev/null; then
        tar -C "$2" -xJf "$1"
    else
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"
    fi
}

# carry_sources_hash: one sha256 over the paths and contents of the files a phase reads beside the
# binaries (configs/*.yaml, bench/*.sh, bench/*.py), run from the repository root; computed the same
# way where the carry is staged and where it runs (the GPU machine's copy has no .git).
carry_sources_hash() {
    local f
    for f in configs/*.yaml bench/*.sh bench/*.py; do
        [[ -f "$f" ]] && printf '%s %s\n' "$f" "$(sha256sum < "$f" | cut -d' ' -f1)"
    done | sha256sum | cut -c1-16
}

# carry_matches_tree CARRY_DIR: prints one line; returns 0 when the carry was staged from this tree:
# the same commit where git can tell, and the same carry_sources_hash; 1 otherwise.
carry_matches_tree() {
    local carry=$1 built tree src_built src_tree
    built=$(head -1 "$carry/COMMIT" 2>/dev/null)
    src_built=$(sed -n 's/^sources: //p' "$carry/COMMIT" 2>/dev/null | head -1)
    src_tree=$(carry_sources_hash)
    tree=$(git rev-parse HEAD 2>/dev/null || echo "")
    if [[ -n "$tree" && "$built" != "$tree" ]]; then
        echo "the carry was built at commit ${built:-unknown}, the tree is at $tree (bench/gpu_check.sh --prepare)"
        return 1
    fi
    if [[ "$src_built" != "$src_tree" ]]; then
        echo "the carry's scripts and configs (sources ${src_built:-unknown}) differ from the tree's ($src_tree) (bench/gpu_check.sh --prepare)"
        return 1
    fi
    local same="" dirty=""
    [[ -n "$tree" ]] && same=" (the tree's too)"
    grep -q '^uncommitted:' "$carry/COMMIT" && dirty=", with uncommitted changes"
    echo "commit ${built:-unknown}$same, sources $src_tree$dirty"
}

# carry_copy_libs DEST FILE...: copy every library the files need (resolved by ldd, transitively)
# that is not the GPU image's into DEST.
carry_copy_libs() {
    local dest=$1 lib
    shift
    for f in "$@"; do ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3}'; done | sort -u | while read -r lib; do
        [[ "$(basename "$lib")" =~ $CARRY_IMAGE_LIBS ]] && continue
        cp -Ln "$lib" "$dest/" 2>/dev/null || cp -L "$lib" "$dest/"
    done
}

# carry_stage BUILD_DIR CARRY_DIR DATA_DIR: stage the carry (payload.tar.xz: bin/, lib/, ompi/;
# data/quickstart/; COMMIT), then carry_check it.
carry_stage() {
    local build=$1 carry=$2 data=$3 root
    root=$(pwd)
    for b in "${CARRY_BINARIES[@]}"; do
        [[ -x "$build/$b" ]] || { carry_say "$build/$b is missing (cmake --build $build --target $(basename "$b"))"; return 1; }
    done
    if [[ ! -f "$data/manifest.json" ]] || ! ls "$data"/train_*.bin >/dev/null 2>&1; then
        carry_say "no prepared shards in $data (manifest.json, train_*.bin, val_*.bin)"
        return 1
    fi
    local stage
    stage=$(mktemp -d "${TMPDIR:-/tmp}/skew-carry-stage.XXXXXX")
    mkdir -p "$stage/bin" "$stage/lib" "$stage/ompi/bin" "$stage/ompi/lib/openmpi" "$stage/ompi/lib/pmix" \
             "$stage/ompi/share" "$stage/ompi/etc"
    for b in "${CARRY_BINARIES[@]}"; do cp "$build/$b" "$stage/bin/"; done
    strip "$stage/bin/"* 2>/dev/null || true
    # Open MPI (Debian's, relocated by OPAL_PREFIX and the component paths in carry_env)
    if command -v orterun >/dev/null && [[ -d "$CARRY_OMPI_PKGLIB" ]]; then
        cp -L "$(command -v orterun)" "$stage/ompi/bin/orterun"
        ln -s orterun "$stage/ompi/bin/mpirun"
        for f in "$CARRY_OMPI_PKGLIB"/*.so; do
            carry_needed "$f" | grep -Eq "$CARRY_SKIP_COMPONENTS" || cp "$f" "$stage/ompi/lib/openmpi/"
        done
        for f in "$CARRY_PMIX_LIB"/*.so; do
            carry_needed "$f" | grep -Eq "$CARRY_SKIP_COMPONENTS" || cp "$f" "$stage/ompi/lib/pmix/"
        done
        cp -r /usr/share/openmpi "$stage/ompi/share/"
        cp /etc/openmpi/openmpi-mca-params.conf "$stage/ompi/etc/" 2>/dev/null || : > "$stage/ompi/etc/openmpi-mca-params.conf"
    else
        carry_say "warning: no Open MPI here (orterun, $CARRY_OMPI_PKGLIB): the carry has no mpirun"
    fi
    carry_copy_libs "$stage/lib" "$stage"/bin/* "$stage"/ompi/bin/orterun "$stage"/ompi/lib/openmpi/*.so \
        "$stage"/ompi/lib/pmix/*.so
    rm -rf "$carry"
    mkdir -p "$carry/data/quickstart"
    tar -C "$stage" -cf - bin lib ompi | xz -T0 -6 > "$carry/payload.tar.xz"
    rm -rf "$stage"
    cp "$data"/manifest.json "$data"/train_*.bin "$data"/val_*.bin "$carry/data/quickstart/"
    {
        git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown
        git -C "$root" status --short 2>/dev/null | sed 's/^/uncommitted: /'
        echo "built: $build ($(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null))"
        echo "sources: $(cd "$root" && carry_sources_hash)"
    } > "$carry/COMMIT"
    carry_check "$carry"
}

# carry_check CARRY_DIR: fail (1) when the carry is over CARRY_MAX_MIB or an ELF file in it needs a
# library that is neither carried nor the GPU image's, or a binary links NCCL; prints what is in it.
carry_check() {
    local carry=$1 kib bad=0 tmp
    [[ -f "$carry/payload.tar.xz" ]] || { carry_say "$carry/payload.tar.xz is missing (bench/gpu_check.sh --prepare)"; return 1; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/skew-carry-check.XXXXXX")
    carry_unpack "$carry/payload.tar.xz" "$tmp" || { carry_say "$carry/payload.tar.xz does not unpack"; rm -rf "$tmp"; return 1; }
    echo "carry $carry ($(head -1 "$carry/COMMIT" 2>/dev/null)):"
    (cd "$carry" && du -ak . | sort -k2 | awk '{printf "  %8.1f MiB  %s\n", $1 / 1024, $2}' | grep -v ' \.$')
    echo "  payload unpacked:"
    (cd "$tmp" && du -ak bin lib ompi | sort -rn | head -12 | awk '{printf "  %8.1f MiB  %s\n", $1 / 1024, $2}')
    kib=$(du -sk "$carry" | cut -f1)
    if (( kib > CARRY_MAX_MIB * 1024 )); then
        carry_say "FAILED: $carry is $((kib / 1024)) MiB, over the $CARRY_MAX_MIB MiB the device tool leaves for it"
        bad=1
    fi
    local carried
    carried=$(ls "$tmp/lib" | tr '\n' ' ')
    local f so
    while read -r f; do
        readelf -h "$f" >/dev/null 2>&1 || continue
        while read -r so; do
            [[ -z "$so" ]] && continue
            [[ "$so" =~ $CARRY_IMAGE_LIBS ]] && [[ "$so" != libnccl.so.2 || "$f" != "$tmp/bin/"* ]] && continue
            if [[ "$so" == libnccl.so.2 ]]; then
                carry_say "FAILED: ${f#"$tmp"/} links $so: NCCL must be loaded at run time (dist/nccl_library.h)"
                bad=1
            elif [[ " $carried " != *" $so "* ]]; then
                carry_say "FAILED: ${f#"$tmp"/} needs $so, which is neither carried nor in the GPU image"
                bad=1
            fi
        done < <(carry_needed "$f")
    done < <(find "$tmp/bin" "$tmp/lib" "$tmp/ompi" -type f)
    rm -rf "$tmp"
    (( bad == 0 )) && echo "  every library each carried file needs is carried or the GPU image's; $((kib / 1024)) MiB in all"
    return $bad
}

# carry_env CARRY_DIR: on the GPU machine, unpack the payload into a temporary folder (or reuse the
# one SKEW_CARRY_DIR names, where bench/gpu_check.sh all unpacked it for its phases) and export
# what the carried programs need: SKEW_CARRY_BIN (the binaries), LD_LIBRARY_PATH (the carried
# libraries, then the CUDA toolkit's and wherever the image keeps cuBLASLt, the CUDA runtime and
# NCCL), PATH (the carried mpirun) with Open MPI's relocation variables, and the tests' SKEW_BINARY
# and SKEW_SOURCE_DIR (tests/test_paths.h). Returns 1 when the payload does not unpack.
carry_env() {
    local carry=$1 dir d
    if [[ -n "${SKEW_CARRY_DIR:-}" && -x "${SKEW_CARRY_DIR}/bin/skew" ]]; then
        dir=$SKEW_CARRY_DIR
        # exported already (a phase of bench/gpu_check.sh all): nothing to add
        [[ "${LD_LIBRARY_PATH:-}" == "$dir/lib"* && "${SKEW_CARRY_BIN:-}" == "$dir/bin" ]] && return 0
    else
        dir=$(mktemp -d "${TMPDIR:-/tmp}/skew-carry.XXXXXX")
        carry_unpack "$carry/payload.tar.xz" "$dir" || { carry_say "cannot unpack $carry/payload.tar.xz into $dir"; return 1; }
    fi
    export SKEW_CARRY_DIR=$dir SKEW_CARRY_BIN=$dir/bin
    local path=$dir/lib
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
        [[ -d "$d" ]] && path="$path:$d"
    done
    for d in $(find /usr/local /opt /usr/lib -maxdepth 9 \( -name 'libcublasLt.so.13*' -o -name 'libcudart.so.13*' \
                   -o -name 'libnccl.so.2*' \) -printf '%h\n' 2>/dev/null | sort -u | head -8); do
        path="$path:$d"
    done
    export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if [[ -x "$dir/ompi/bin/orterun" ]]; then
        export PATH="$dir/ompi/bin:$PATH" OPAL_PREFIX="$dir/ompi" OPAL_PKGDATADIR="$dir/ompi/share/openmpi" \
               OPAL_SYSCONFDIR="$dir/ompi/etc" OMPI_MCA_mca_base_component_path="$dir/ompi/lib/openmpi" \
               PMIX_MCA_mca_base_component_path="$dir/ompi/lib/pmix"
    fi
    export SKEW_BINARY="$dir/bin/skew" SKEW_SOURCE_DIR="$(pwd)"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -uo pipefail
    cd "$(dirname "$0")/.."
    case "${1:-}" in
        stage) carry_stage "$2" "$3" "$4" ;;
        check) carry_check "$2" ;;
        matches) carry_matches_tree "$2" ;;
        *) echo "usage: bench/gpu_carry.sh stage BUILD_DIR CARRY_DIR DATA_DIR | check CARRY_DIR | matches CARRY_DIR" >&2; exit 2 ;;
    esac
fi
