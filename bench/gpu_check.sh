#!/usr/bin/env bash
# bench/gpu_check.sh: the one script a GPU machine runs for the CUDA backend. It builds
# (or takes prebuilt) test_gpu, skew and bench_gpu_ops for sm_90a, runs the GPU tests (ctest label
# `gpu`: every CUDA op against its CPU twin, and one training step of configs/tiny.yaml against the
# CPU backend with its peak device memory against the plan), then the whole-step training benchmark
# (`skew train configs/paper-6.78b.yaml`, SkewAdam, batch 64 x 128, on the CUDA backend for a few
# steps over the carried quickstart shards: tokens/s, MFU, phase times, peak device memory vs the
# plan), the optimizer section (each of skewadam, adamw, lion, muon, adafactor, galore on the paper
# model for OPT_STEPS steps: step and phase times), the memory section (every optimizer at
# microbatch 8 and 64, SkewAdam deferred at 64 and 16: measured peak against the plan's device
# total), a compute-sanitizer memcheck of a few tests, and
# the GPU micro-benchmarks (the optimizer steps at the paper's parameter set first). Every step is
# time-capped; the whole run stays within BUDGET (300 s). $OUT ends up holding summary.txt and
# results.tar.gz (every log and result).
#
#   bench/gpu_check.sh --prepare   on the development machine (no GPU needed): build for sm_90a
#                                  and stage the binaries with their non-system shared libraries
#                                  (as lib.tar.gz) and the prepared quickstart shards in
#                                  build-gpu/carry (about 33 MiB; the device tool carries at most
#                                  64 MiB with the working tree), for a GPU image
#                                  that lacks the project's dependencies (fmt, OpenBLAS, Catch2, ...).
#                                  The shards: GPU_TRAIN_DATA (default data/prepared/quickstart,
#                                  made by scripts/fetch_data.sh + skew prepare).
#   bench/gpu_check.sh             on the GPU machine: use build-gpu/carry when it is there and
#                                  runs, else build from source with CMake on all cores.
# Results: $OUT (default bench/results/gpu-check-<UTC time>): summary.txt and results.tar.gz with
# env.txt, build.log, test_gpu.log (+ ctest.log in a source build), train/ (train.log,
# steps_skewadam.jsonl, metrics_skewadam.json, config.yaml, plan.json, info.txt, nvidia-smi.csv,
# summary.json from bench/summarize_gpu_train.py; train.recompute block), train_recompute_none/ (the
# same run with train.recompute none), optim/<optimizer>/ (the same for each optimizer),
# memcheck.log, bench_gpu_ops.log and .jsonl.
# Knobs (environment): BUDGET (300 s), TRAIN_CONFIG (configs/paper-6.78b.yaml), TRAIN_STEPS (8),
# TRAIN_MB (microbatch, 64), TRAIN_CAP (seconds for the training run, 45), TRAIN_BACKEND (cuda;
# cpu with a small TRAIN_CONFIG tries the training section without a GPU), OPT_STEPS (6), OPT_CAP
# (seconds per optimizer, 25), OPTIMIZERS ("adamw lion muon adafactor galore"; skewadam is the
# training run), RECOMPUTE_MODES ("none": the training run again under each of these
# train.recompute modes, into train_recompute_<mode>/, at TRAIN_MB or the largest microbatch the
# plan fits on the device; "" skips), RECOMPUTE_CAP (seconds per mode, 45), MEM_RUNS (1; 0 skips the
# memory section), MEM_STEPS (2), MEM_CAP (25), TEST_CAP (90), BENCH_CAP (50). The data separator is read from the shards'
# manifest.json and passed as data.separator, so shards prepared either way run.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CARRY=build-gpu/carry

if [[ "${1:-}" == "--prepare" ]]; then
    set -e
    JOBS=${JOBS:-2}
    BUILD_DIR=${BUILD_DIR:-build-gpu}  # an existing sm_90a build dir may be reused
    TRAIN_DATA=${GPU_TRAIN_DATA:-data/prepared/quickstart}
    if [[ ! -f "$TRAIN_DATA/manifest.json" ]] || ! ls "$TRAIN_DATA"/train_*.bin >/dev/null 2>&1; then
        echo "gpu_check --prepare: no prepared shards in $TRAIN_DATA (manifest.json, train_*.bin, val_*.bin) for the" >&2
        echo "training benchmark; make them with scripts/fetch_data.sh and" >&2
        echo "  build/tools/skew prepare --input data/corpus --out data/prepared/quickstart --tokenizer data/tokenizer" >&2
        echo "or point GPU_TRAIN_DATA at a prepared folder" >&2
        exit 1
    fi
    cmake -S . -B "$BUILD_DIR" -DSKEW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD_DIR" -j"$JOBS" --target test_gpu bench_gpu_ops skew
    rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/data/quickstart"
    cp "$BUILD_DIR"/tests/test_gpu "$BUILD_DIR"/bench/bench_gpu_ops "$BUILD_DIR"/tools/skew "$CARRY/bin/"
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
    # OpenBLAS alone is 36 MB: the libraries travel as one gzip tarball (46 -> 15 MB), unpacked on
    # the GPU machine into a temporary folder.
    tar -C "$CARRY" -cf - lib | gzip -9 > "$CARRY/lib.tar.gz"
    rm -rf "$CARRY/lib"
    # The training benchmark's data: a few MiB of llm.c shards (the paper config's data.dir is overridden).
    cp "$TRAIN_DATA"/manifest.json "$TRAIN_DATA"/train_*.bin "$TRAIN_DATA"/val_*.bin "$CARRY/data/quickstart/"
    (git rev-parse HEAD 2>/dev/null || echo unknown) > "$CARRY/COMMIT"
    git status --short -- kernels/cuda tests/gpu bench/bench_gpu_ops.cu model optim train engine tools >> "$CARRY/COMMIT" 2>/dev/null || true
    du -sh "$CARRY/bin" "$CARRY/lib.tar.gz" "$CARRY/data"
    du -sh "$CARRY"
    KIB=$(du -sk "$CARRY" | cut -f1)
    if (( KIB > 60 * 1024 )); then
        echo "gpu_check --prepare: WARNING: $CARRY is $((KIB / 1024)) MiB; the device tool carries at most 64 MiB in all" >&2
    fi
    echo "staged in $CARRY; run on the GPU machine with carry [\"$CARRY\"]: bench/gpu_check.sh"
    exit 0
fi

OUT=${OUT:-$ROOT/bench/results/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
START=$(date +%s)
BUDGET=${BUDGET:-300}  # seconds for the whole run: about half a 10-minute device call
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
    echo "mpirun: $(command -v mpirun || echo 'not found: the NCCL training tests under mpirun -np 1 are skipped')"
    nproc
} > "$OUT/env.txt"
log "gpu_check: results in $OUT"

# Library search path for carried binaries: carried libs (unpacked from lib.tar.gz), then the CUDA
# toolkit, then pip's CUDA libs.
LIBPATH="$ROOT/$CARRY/lib"
if [[ -f "$CARRY/lib.tar.gz" ]]; then
    LIBDIR=$(mktemp -d "${TMPDIR:-/tmp}/skew-carry.XXXXXX")
    if tar -C "$LIBDIR" -xzf "$CARRY/lib.tar.gz"; then
        LIBPATH="$LIBDIR/lib"
    else
        log "could not unpack $CARRY/lib.tar.gz into $LIBDIR"
    fi
fi
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && LIBPATH="$LIBPATH:$d"
done
for d in $(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublasLt.so.13*' -printf '%h\n' 2>/dev/null | sort -u | head -3); do LIBPATH="$LIBPATH:$d"; done
export LD_LIBRARY_PATH="$LIBPATH:${LD_LIBRARY_PATH:-}"

MODE=none
TEST_BIN="" BENCH_BIN="" SKEW_BIN=""
loads() { [[ -x "$1" ]] && ! ldd "$1" 2>&1 | grep -q "not found"; }
if loads "$CARRY/bin/test_gpu"; then
    MODE=carry
    TEST_BIN="$CARRY/bin/test_gpu"
    loads "$CARRY/bin/bench_gpu_ops" && BENCH_BIN="$CARRY/bin/bench_gpu_ops"
    loads "$CARRY/bin/skew" && SKEW_BIN="$CARRY/bin/skew"
    log "using prebuilt binaries from $CARRY ($(head -1 "$CARRY/COMMIT" 2>/dev/null))"
else
    [[ -x "$CARRY/bin/test_gpu" ]] && { log "carried binaries do not load:"; ldd "$CARRY/bin/test_gpu" | grep "not found" | tee -a "$OUT/summary.txt"; }
    log "building from source (sm_90a, $(nproc) jobs)"
    if timeout "$(tmo 60)" cmake -S . -B build-gpu-src -DSKEW_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=Release \
            > "$OUT/build.log" 2>&1 \
        && timeout "$(tmo 300)" cmake --build build-gpu-src -j"$(nproc)" --target test_gpu bench_gpu_ops skew >> "$OUT/build.log" 2>&1; then
        MODE=source
        TEST_BIN=build-gpu-src/tests/test_gpu
        BENCH_BIN=build-gpu-src/bench/bench_gpu_ops
        SKEW_BIN=build-gpu-src/tools/skew
    else
        log "source build FAILED (see build.log; the GPU image may lack fmt/OpenBLAS/Catch2: run --prepare on the dev machine and carry $CARRY)"
        tail -20 "$OUT/build.log" >> "$OUT/summary.txt"
    fi
fi
if [[ "$MODE" == carry ]]; then
    COMMIT=$(head -1 "$CARRY/COMMIT" 2>/dev/null || echo unknown)
else
    COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
fi
TRAIN_DATA=""
for d in "$CARRY/data/quickstart" data/prepared/quickstart; do
    if [[ -f "$d/manifest.json" ]]; then TRAIN_DATA="$ROOT/$d"; break; fi
done

TEST_RC=skipped TRAIN_RC=skipped MEMCHECK_RC=skipped BENCH_RC=skipped
if [[ -n "$TEST_BIN" ]]; then
    log "GPU tests"
    if [[ "$MODE" == source ]]; then
        (cd build-gpu-src && timeout "$(tmo "${TEST_CAP:-90}")" ctest -L gpu --output-on-failure) > "$OUT/ctest.log" 2>&1
        TEST_RC=$?
        tail -5 "$OUT/ctest.log" >> "$OUT/summary.txt"
    fi
    if [[ "$MODE" == carry ]]; then  # all of test_gpu is the ctest label `gpu`
        timeout "$(tmo "${TEST_CAP:-90}")" "$TEST_BIN" --durations yes > "$OUT/test_gpu.log" 2>&1
        TEST_RC=$?
        tail -4 "$OUT/test_gpu.log" | tee -a "$OUT/summary.txt"
    fi
    (( TEST_RC == 77 )) && log "test_gpu exit 77: no CUDA device visible"
    log "GPU tests exit $TEST_RC"
fi

# ---- the whole-step training benchmark: the paper's model, SkewAdam, batch 64 x 128, a few steps,
# then the optimizer section: the same run for each other optimizer (OPT_STEPS steps).
# The one evaluation runs after the last step (eval_batches 1) and writes metrics_<opt>.json; the
# trainer then writes two checkpoints of ~14 GiB each (best, last), which would only cost time: once
# the metrics file is there and every step is logged, the run is killed (SIGKILL: SIGTERM would
# checkpoint too). The run folder lives outside $OUT; its small files are copied into the section's
# folder. The shards' separator (manifest.json) is passed as data.separator, so shards prepared with
# either separator run (the trainer refuses a mismatch).
TRAIN_CONFIG=${TRAIN_CONFIG:-configs/paper-6.78b.yaml}
TRAIN_STEPS=${TRAIN_STEPS:-8}
TRAIN_MB=${TRAIN_MB:-64}
TRAIN_CAP=${TRAIN_CAP:-45}
TRAIN_BACKEND=${TRAIN_BACKEND:-cuda}  # cpu: a dry run of this section without a GPU (with a small TRAIN_CONFIG)
OPT_STEPS=${OPT_STEPS:-6}
OPT_CAP=${OPT_CAP:-25}
OPTIMIZERS=${OPTIMIZERS:-adamw lion muon adafactor galore}
SEPARATOR=""
if [[ -n "$TRAIN_DATA" ]]; then
    SEPARATOR=$(sed -n 's/.*"separator"[[:space:]]*:[[:space:]]*"\([a-z]*\)".*/\1/p' "$TRAIN_DATA/manifest.json" | head -1)
fi
# run_train OPTIMIZER STEPS CAP DIR: one run killed after its evaluation (or at CAP); exit 0 when it
# logged every step and wrote its metrics, 124 at the cap.
# [MICROBATCH [--set KEY=VALUE ...]]: the microbatch (default TRAIN_MB) and further overrides.
run_train() {
    local o=$1 steps=$2 cap=$3 T=$4 mbs=${5:-$TRAIN_MB}
    shift 4; (( $# )) && shift
    mkdir -p "$T"
    local RUN_PARENT RUN_DIR
    RUN_PARENT=$(mktemp -d "${TMPDIR:-/tmp}/skew-gpu-train.XXXXXX")
    RUN_DIR="$RUN_PARENT/run"
    local SETS=(--set "runtime.backend=$TRAIN_BACKEND" --set "data.dir=$TRAIN_DATA" --set "train.steps=$steps"
          --set "train.microbatch=${RUN_MB:-$mbs}" --set "train.recompute=${RUN_RECOMPUTE:-block}"
          --set "train.eval_every=$steps" --set train.eval_batches=1
          --set train.log_every=1 --set train.checkpoint_every=1000000 "$@")
    [[ -n "$SEPARATOR" ]] && SETS+=(--set "data.separator=$SEPARATOR")
    {
        echo "commit: $COMMIT"
        echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
        echo "config: $TRAIN_CONFIG"
        echo "command: skew train $TRAIN_CONFIG --optimizers $o --plain ${SETS[*]}"
    } > "$T/info.txt"
    "$SKEW_BIN" plan "$TRAIN_CONFIG" --optimizer "$o" --json "${SETS[@]}" > "$T/plan.json" 2> "$T/plan.err"
    log "train $o: $TRAIN_CONFIG, $steps steps, microbatch ${RUN_MB:-$mbs}, recompute ${RUN_RECOMPUTE:-block}${*:+ ($*)} (cap ${cap}s)"
    local SMI_PID=""
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,power.draw --format=csv -lms 500 > "$T/nvidia-smi.csv" 2>&1 &
        SMI_PID=$!
    fi
    local TRAIN_START TRAIN_PID ENDED="exited" logged=0 rc
    TRAIN_START=$(date +%s)
    "$SKEW_BIN" train "$TRAIN_CONFIG" --optimizers "$o" --out "$RUN_DIR" --plain "${SETS[@]}" > "$T/train.log" 2>&1 &
    TRAIN_PID=$!
    while kill -0 "$TRAIN_PID" 2>/dev/null; do
        logged=$(cat "$RUN_DIR"/steps_"$o".jsonl 2>/dev/null | wc -l)
        if [[ -f "$RUN_DIR/metrics_$o.json" ]] && (( logged >= steps )); then
            kill -KILL "$TRAIN_PID" 2>/dev/null; ENDED="killed after its evaluation (checkpoints skipped)"; break
        fi
        if (( $(date +%s) - TRAIN_START >= cap )); then
            kill -KILL "$TRAIN_PID" 2>/dev/null; ENDED="killed at the ${cap}s cap after $logged steps"; break
        fi
        sleep 1
    done
    wait "$TRAIN_PID"
    rc=$?
    [[ "$ENDED" == killed\ after* ]] && rc=0
    [[ "$ENDED" == killed\ at* ]] && rc=124
    [[ -n "$SMI_PID" ]] && kill "$SMI_PID" 2>/dev/null
    cp "$RUN_DIR"/metrics_*.json "$RUN_DIR"/steps_*.jsonl "$RUN_DIR"/config.yaml "$T/" 2>/dev/null
    rm -rf "$RUN_PARENT"
    echo "ended: $ENDED after $(( $(date +%s) - TRAIN_START ))s, exit $rc" >> "$T/info.txt"
    log "train $o $ENDED after $(( $(date +%s) - TRAIN_START ))s (exit $rc)"
    (( rc != 0 )) && tail -3 "$T/train.log" >> "$OUT/summary.txt"
    if command -v python3 >/dev/null && [[ -f "$T/steps_$o.jsonl" ]]; then
        # Median phase times over the steps after the first: optimizer step, grad-norm pass,
        # forward/backward; the first step's time includes nothing of the init (logged separately).
        python3 - "$T" "$o" >> "$OUT/summary.txt" 2>/dev/null <<'EOF'
import json, os, statistics, sys
T, o = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(os.path.join(T, f"steps_{o}.jsonl")) if l.strip()]
later = rows[1:] or rows
def med(k):
    v = [r[k] for r in later if isinstance(r.get(k), (int, float))]
    return round(statistics.median(v), 1) if v else None
print(f"  {o}: {len(rows)} steps; median ms: step {med('step_ms')}, fwd_bwd {med('fwd_bwd_ms')}, "
      f"grad_norm {med('grad_norm_ms')}, optimizer {med('optimizer_ms')}; tokens/s {med('tokens_per_sec')}")
EOF
    fi
    return $rc
}

# summarize_train DIR: bench/summarize_gpu_train.py into DIR/summary.json and one line of summary.txt
summarize_train() {
    local T=$1
    command -v python3 >/dev/null || return 0
    python3 bench/summarize_gpu_train.py "$T" --out "$T/summary.json" > /dev/null 2> "$T/summary.err"
    python3 - "$T/summary.json" >> "$OUT/summary.txt" 2>/dev/null <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
m = s["memory"]
print(f"train (recompute {s.get('recompute')}, microbatch {s['microbatch']}): {s['steps_measured']} steps measured, "
      f"median {s['tokens_per_sec_median']} tokens/s, MFU {s['mfu']}, phases {s['phase_ms_median']}, "
      f"peak {m['measured_peak_gib']} GiB vs plan {m['plan_peak_gib']} GiB (activations {s.get('plan_activations_gib')} GiB), "
      f"targets {[(k, v['pass']) for k, v in s['targets'].items()]}")
EOF
    tail -1 "$OUT/summary.txt"
}

OPT_RC=skipped
RECOMPUTE_RC=skipped
if [[ -z "$SKEW_BIN" ]]; then
    log "training benchmark skipped: no skew binary"
elif [[ -z "$TRAIN_DATA" ]]; then
    log "training benchmark skipped: no prepared shards ($CARRY/data/quickstart or data/prepared/quickstart)"
elif (( $(left) < 60 )); then
    log "training benchmark skipped: too little time left ($(left)s)"
else
    T="$OUT/train"
    run_train skewadam "$TRAIN_STEPS" "$(tmo "$TRAIN_CAP")" "$T"
    TRAIN_RC=$?
    summarize_train "$T"
    # ---- the same run under the other train.recompute modes (block above), at TRAIN_MB or, when
    # the plan says it does not fit the device (its memory less 1 GiB for the CUDA context and
    # libraries), the largest microbatch that does
    RECOMPUTE_RC=0
    for mode in ${RECOMPUTE_MODES-none}; do
        if (( $(left) - 90 < 30 )); then
            log "train recompute $mode skipped: too little time left ($(left)s)"
            RECOMPUTE_RC=1
            continue
        fi
        mb=$TRAIN_MB
        dev_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
        if [[ "$dev_mib" =~ ^[0-9]+$ ]] && command -v python3 >/dev/null; then
            fit=$("$SKEW_BIN" plan "$TRAIN_CONFIG" --optimizer skewadam --microbatch "$TRAIN_MB" --json \
                    --set "runtime.backend=$TRAIN_BACKEND" --set "train.recompute=$mode" --budget "$(( dev_mib - 1024 ))MiB" \
                  2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin).get("largest_microbatch") or 0)')
            if [[ "$fit" =~ ^[0-9]+$ ]] && (( fit > 0 && fit < TRAIN_MB )); then
                log "train recompute $mode: microbatch $TRAIN_MB does not fit $(( dev_mib - 1024 )) MiB by the plan; running at $fit"
                mb=$fit
            fi
        fi
        cap=${RECOMPUTE_CAP:-45}
        (( cap > $(left) - 90 )) && cap=$(( $(left) - 90 ))
        RUN_MB=$mb RUN_RECOMPUTE=$mode run_train skewadam "$TRAIN_STEPS" "$cap" "$OUT/train_recompute_$mode" || RECOMPUTE_RC=1
        summarize_train "$OUT/train_recompute_$mode"
    done
    # ---- the optimizer section: each other optimizer's step on the paper model; the time left is
    # shared, 90 s stay for memcheck and the micro-benchmarks.
    OPT_RC=0
    for o in $OPTIMIZERS; do
        room=$(( $(left) - 90 ))
        if (( room < 15 )); then
            log "optimizer section: $o skipped, too little time left ($(left)s)"
            OPT_RC=1
            continue
        fi
        cap=$OPT_CAP
        (( cap > room )) && cap=$room
        run_train "$o" "$OPT_STEPS" "$cap" "$OUT/optim/$o" || OPT_RC=1
    done
fi

# ---- the memory section (plan == measured): every optimizer at microbatch 8 and 64 (the runs above
# are at TRAIN_MB), and SkewAdam with deferred expert gradients at 64 and 16, MEM_STEPS steps each:
# the measured peak (whole device) against the plan's device total (the arena plus skew plan's CUDA
# constant, metrics plan_bytes) and the context and libraries measured at start-up
# (device_overhead_bytes). Target: within 0.25 GiB. MEM_RUNS=0 skips it.
MEM_STEPS=${MEM_STEPS:-2}
MEM_CAP=${MEM_CAP:-25}
mem_line() {  # mem_line DIR LABEL OPTIMIZER: one summary line from the run's summary.json
    python3 bench/summarize_gpu_train.py "$1" --optimizer "$3" --warmup 0 --out "$1/summary.json" > /dev/null 2> "$1/summary.err"
    python3 - "$1/summary.json" "$2" >> "$OUT/summary.txt" 2>/dev/null <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
f = lambda v: "n/a" if v is None else f"{v:.3f}"
print(f"  memory {sys.argv[2]}: peak {f(m['measured_peak_gib'])} GiB, plan {f(m['plan_device_total_gib'])} GiB "
      f"(arena {f(m['plan_peak_gib'])} + constant {f(m['device_overhead_constant_gib'])}; start-up measured "
      f"{f(m['device_overhead_gib'])}), peak - plan {f(m['diff_device_total_gib'])} GiB")
EOF
}
if [[ "${MEM_RUNS:-1}" != 0 && -n "$SKEW_BIN" && -n "$TRAIN_DATA" ]] && command -v python3 >/dev/null; then
    MEM_PLAN=()
    for o in skewadam $OPTIMIZERS; do MEM_PLAN+=("$o:8:stored" "$o:64:stored"); done
    MEM_PLAN+=("skewadam:64:deferred" "skewadam:16:deferred")
    for item in "${MEM_PLAN[@]}"; do
        IFS=: read -r o mbs mode <<< "$item"
        room=$(( $(left) - 75 ))
        if (( room < 15 )); then
            log "memory section: $o microbatch $mbs $mode skipped, too little time left ($(left)s)"
            continue
        fi
        cap=$MEM_CAP
        (( cap > room )) && cap=$room
        D="$OUT/memory/$o-mb$mbs-$mode"
        run_train "$o" "$MEM_STEPS" "$cap" "$D" "$mbs" --set "train.expert_grads=$mode"
        mem_line "$D" "$o microbatch $mbs $mode" "$o"
    done
fi

if [[ -n "$TEST_BIN" ]] && command -v compute-sanitizer >/dev/null && (( $(left) > 75 )); then
    # Catch2 v2: comma-separated specs are OR-ed (spaces would AND them into one spec matching nothing).
    MEMCHECK_TESTS="gpu dispatch is*,gpu gather*,gpu embedding forward*,gpu attention matches the CPU for head_dim 64*"
    log "compute-sanitizer memcheck: $MEMCHECK_TESTS"
    timeout "$(tmo 40)" compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST_BIN" "$MEMCHECK_TESTS" \
        > "$OUT/memcheck.log" 2>&1
    MEMCHECK_RC=$?
    # A filter that matched nothing must not read as "0 errors".
    if ! grep -qE "in [1-9][0-9]* test case|test cases: *[1-9]" "$OUT/memcheck.log"; then
        log "memcheck ran no test case (filters: $MEMCHECK_TESTS)"
        (( MEMCHECK_RC == 0 )) && MEMCHECK_RC=3
    fi
    tail -3 "$OUT/memcheck.log" >> "$OUT/summary.txt"
fi
if [[ -n "$BENCH_BIN" ]] && (( $(left) < 30 )); then
    log "too little time left for the benchmarks ($(left)s)"
elif [[ -n "$BENCH_BIN" ]]; then
    log "GPU micro-benchmarks (the optimizer steps at the paper's parameter set first)"
    timeout "$(tmo "${BENCH_CAP:-50}")" "$BENCH_BIN" "$OUT/bench_gpu_ops.jsonl" --quick --optim-config "$TRAIN_CONFIG" \
        > "$OUT/bench_gpu_ops.log" 2>&1
    BENCH_RC=$?
    cat "$OUT/bench_gpu_ops.log" >> "$OUT/summary.txt"
fi
log "mode $MODE; tests: $TEST_RC; train: $TRAIN_RC; recompute modes: $RECOMPUTE_RC; optimizers: $OPT_RC; memcheck: $MEMCHECK_RC; bench: $BENCH_RC"
# One archive of every result next to summary.txt (the device tool brings back a flat, small folder).
if tar -C "$OUT" --exclude=./results.tar.gz.part --exclude=./summary.txt -czf "$OUT/results.tar.gz.part" . 2>/dev/null; then
    mv "$OUT/results.tar.gz.part" "$OUT/results.tar.gz"
    find "$OUT" -mindepth 1 -maxdepth 1 ! -name results.tar.gz ! -name summary.txt -exec rm -rf {} +
fi
[[ "$TEST_RC" == 0 && "$TRAIN_RC" == 0 && "$BENCH_RC" == 0 ]]
