#!/usr/bin/env bash
# bench/gpu_check.sh: the one script a GPU machine runs for the CUDA backend (issue 7). It builds
# (or takes prebuilt) test_gpu and bench_gpu_ops for sm_90a, runs the GPU tests (ctest label `gpu`:
# every CUDA op against its CPU twin, and one training step of configs/tiny.yaml against the CPU
# backend with its peak device memory against the plan), a compute-sanitizer memcheck of a few tests, and the GPU
# micro-benchmarks, and writes every log and result under $OUT. Budget: well under 10 minutes.
#
#   bench/gpu_check.sh --prepare   on the development machine (no GPU needed): build for sm_90a
#                                  and stage the binaries with their non-system shared libraries
#                                  in build-gpu/carry (about 45 MiB), for a GPU image that lacks
#                                  the project's dependencies (fmt, OpenBLAS, Catch2, ...).
#   bench/gpu_check.sh             on the GPU machine: use build-gpu/carry when it is there and
#                                  runs, else build from source with CMake on all cores.
# Results: $OUT (default bench/results/gpu-check-<UTC time>): summary.txt, env.txt, build.log,
# test_gpu.log (+ ctest.log in a source build), memcheck.log, bench_gpu_ops.log and .jsonl.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CARRY=build-gpu/carry

if [[ "${1:-}" == "--prepare" ]]; then
    set -e
    JOBS=${JOBS:-2}
    BUILD_DIR=${BUILD_DIR:-build-gpu}  # an existing sm_90a build dir may be reused
    cmake -S . -B "$BUILD_DIR" -DSKEW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD_DIR" -j"$JOBS" --target skew_kernels_cuda test_gpu
    nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I. \
        bench/bench_gpu_ops.cu "$BUILD_DIR"/kernels/cuda/libskew_kernels_cuda.a -lcublasLt -lcublas -lfmt \
        -o "$BUILD_DIR"/bench_gpu_ops
    rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/lib"
    cp "$BUILD_DIR"/tests/test_gpu "$BUILD_DIR"/bench_gpu_ops "$CARRY/bin/"
    strip "$CARRY/bin/"* || true
    # Shared libraries the GPU image may lack; the C runtime, the driver and cuBLAS stay the image's.
    for bin in "$CARRY/bin/"*; do
        ldd "$bin" | awk '/=>/ {print $3}'
    done | sort -u | while read -r lib; do
        case "$(basename "$lib")" in
            libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
            libcuda.so*|libcublas.so*|libcublasLt.so*|libnvidia*) ;;
            *) cp -L "$lib" "$CARRY/lib/" ;;
        esac
    done
    (git rev-parse HEAD 2>/dev/null || echo unknown) > "$CARRY/COMMIT"
    git status --short -- kernels/cuda tests/gpu bench/bench_gpu_ops.cu model optim train engine >> "$CARRY/COMMIT" 2>/dev/null || true
    du -sh "$CARRY"
    echo "staged in $CARRY; run on the GPU machine with carry [\"$CARRY\"]: bench/gpu_check.sh"
    exit 0
fi

OUT=${OUT:-$ROOT/bench/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${BUDGET:-510}  # seconds for the whole run: stays well under a 10-minute device call
# Seconds a step may take: its own cap, or what is left of the budget (at least 10).
tmo() {
    local want=$1 left=$(( BUDGET - ($(date +%s) - START) ))
    (( left < want )) && want=$left
    (( want < 10 )) && want=10
    echo "$want"
}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt"; }

{
    echo "date: $(date -u)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || cat "$CARRY/COMMIT" 2>/dev/null || echo unknown)"
    nvidia-smi 2>&1 || true
    nvcc --version 2>&1 | tail -2 || true
    cmake --version 2>&1 | head -1 || true
    nproc
} > "$OUT/env.txt"
log "gpu_check: results in $OUT"

# Library search path for carried binaries: carried libs, then the CUDA toolkit, then pip's CUDA libs.
LIBPATH="$ROOT/$CARRY/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && LIBPATH="$LIBPATH:$d"
done
for d in $(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublasLt.so.13*' -printf '%h\n' 2>/dev/null | sort -u | head -3); do LIBPATH="$LIBPATH:$d"; done
export LD_LIBRARY_PATH="$LIBPATH:${LD_LIBRARY_PATH:-}"

MODE=none
TEST_BIN="" BENCH_BIN=""
if [[ -x "$CARRY/bin/test_gpu" ]] && ! ldd "$CARRY/bin/test_gpu" 2>&1 | grep -q "not found"; then
    MODE=carry
    TEST_BIN="$CARRY/bin/test_gpu"
    BENCH_BIN="$CARRY/bin/bench_gpu_ops"
    log "using prebuilt binaries from $CARRY ($(head -1 "$CARRY/COMMIT" 2>/dev/null))"
else
    [[ -x "$CARRY/bin/test_gpu" ]] && { log "carried binaries do not load:"; ldd "$CARRY/bin/test_gpu" | grep "not found" | tee -a "$OUT/summary.txt"; }
    log "building from source (sm_90a, $(nproc) jobs)"
    if timeout "$(tmo 60)" cmake -S . -B build-gpu-src -DSKEW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
            > "$OUT/build.log" 2>&1 \
        && timeout "$(tmo 300)" cmake --build build-gpu-src -j"$(nproc)" --target skew_kernels_cuda test_gpu >> "$OUT/build.log" 2>&1; then
        MODE=source
        TEST_BIN=build-gpu-src/tests/test_gpu
        if nvcc -std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -I. bench/bench_gpu_ops.cu \
                build-gpu-src/kernels/cuda/libskew_kernels_cuda.a -lcublasLt -lcublas -lfmt -o build-gpu-src/bench_gpu_ops \
                >> "$OUT/build.log" 2>&1; then
            BENCH_BIN=build-gpu-src/bench_gpu_ops
        fi
    else
        log "source build FAILED (see build.log; the GPU image may lack fmt/OpenBLAS/Catch2: run --prepare on the dev machine and carry $CARRY)"
        tail -20 "$OUT/build.log" >> "$OUT/summary.txt"
    fi
fi

TEST_RC=skipped MEMCHECK_RC=skipped BENCH_RC=skipped
if [[ -n "$TEST_BIN" ]]; then
    log "GPU tests"
    if [[ "$MODE" == source ]]; then
        (cd build-gpu-src && timeout "$(tmo 150)" ctest -L gpu --output-on-failure) > "$OUT/ctest.log" 2>&1
        TEST_RC=$?
        tail -5 "$OUT/ctest.log" >> "$OUT/summary.txt"
    fi
    if [[ "$MODE" == carry ]]; then  # all of test_gpu is the ctest label `gpu`
        timeout "$(tmo 150)" "$TEST_BIN" --durations yes > "$OUT/test_gpu.log" 2>&1
        TEST_RC=$?
        tail -4 "$OUT/test_gpu.log" | tee -a "$OUT/summary.txt"
    fi
    log "GPU tests exit $TEST_RC"
    if command -v compute-sanitizer >/dev/null && (( $(left) > 200 )); then
        log "compute-sanitizer memcheck on dispatch, gather/combine, embedding, attention"
        timeout "$(tmo 90)" compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST_BIN" \
            "gpu dispatch is*" "gpu gather*" "gpu embedding forward*" "gpu attention matches the CPU for head_dim 64*" \
            > "$OUT/memcheck.log" 2>&1
        MEMCHECK_RC=$?
        tail -3 "$OUT/memcheck.log" >> "$OUT/summary.txt"
    fi
fi
if [[ -n "$BENCH_BIN" ]] && (( $(left) < 60 )); then
    log "too little time left for the benchmarks ($(left)s)"
elif [[ -n "$BENCH_BIN" ]]; then
    log "GPU micro-benchmarks"
    timeout "$(tmo 200)" "$BENCH_BIN" "$OUT/bench_gpu_ops.jsonl" > "$OUT/bench_gpu_ops.log" 2>&1
    BENCH_RC=$?
    cat "$OUT/bench_gpu_ops.log" >> "$OUT/summary.txt"
fi
log "mode $MODE; tests: $TEST_RC; memcheck: $MEMCHECK_RC; bench: $BENCH_RC"
[[ "$TEST_RC" == 0 && "$BENCH_RC" == 0 ]]
