#!/usr/bin/env bash
# bench/gpu_check.sh: the GPU check of the CUDA backend, every figure in ONE device call
# (docs/gpu-status.md, "Running the GPU check"), staged here and carried there.
#
#   bench/gpu_check.sh --prepare   here (no GPU needed): build skew, test_gpu, bench_gpu_ops and backend_ops in
#                                  BUILD_DIR (default build/, the README's build: sm_80 + sm_90a) and
#                                  stage them in build-gpu/carry with every library the GPU image
#                                  lacks, a relocatable Open MPI and the shards GPU_TRAIN_DATA
#                                  (default data/prepared/quickstart); fails when the carry is over
#                                  60 MiB or a library is unaccounted for (bench/gpu_carry.sh)
#   bench/gpu_check.sh check-carry here: the carry's size and libraries, and that it was built from
#                                  this tree (commit, scripts and configs); run it before the call
#   bench/gpu_check.sh all         on the GPU machine, the one call: the phases tests, bench and host
#                                  in turn within BUDGET_ALL seconds (540), each under its own budget
#                                  and a time limit; $OUT/summary.txt gathers their verdicts
#   bench/gpu_check.sh tests       a phase: the op table on CUDA against the CPU (backend_ops --mode test
#                                  --large, its grouped GEMM rows under cublas_grouped), the new
#                                  architectures trained CUDA vs CPU (configs/olmoe-tiny.yaml and a
#                                  Qwen3-style variant, 20 steps), every GPU test (test_gpu, one
#                                  process per source file, the least-known first), configs/tiny.yaml
#                                  CUDA vs CPU per optimizer, mpirun from the carry, compute-sanitizer
#                                  memcheck of the kernels never run
#   bench/gpu_check.sh bench       a phase: the paper protocol first (SkewAdam, then AdamW: tokens/s,
#                                  optimizer ms, peak against the plan), the GPU micro-benchmarks (the
#                                  op table's perf rows at the paper's shapes), the other optimizers a
#                                  few steps, deferred expert gradients, train.recompute none, the
#                                  memory section, LAST_OPTIMIZERS (galore-paper) last
#   bench/gpu_check.sh host        a phase of checks that need no GPU but the GPU image's Python
#                                  packages: the Hugging Face peer check (bench/hf_peer_check.py)
#   bench/gpu_check.sh dry-run     here and in CI (no GPU): --prepare from BUILD_DIR, then `all` with
#                                  TRAIN_BACKEND=cpu on configs/tiny.yaml, the system's Open MPI hidden
#                                  (a mount namespace, where one can be made) and the payload unpacked
#                                  by Python, checking that every section ran or said why not
#
# A phase stays within BUDGET seconds, writes $OUT/summary.txt (read it first) and $OUT/<phase>.tar.gz
# (every log), and exits 0 when every section passed. Ended by SIGTERM or SIGINT (the time limit of
# `all`, or any other), it stops the section running, says so in summary.txt and still writes both
# files. OUT defaults to $OUT (the device tool's) or bench/results/gpu-check-<phase>-<UTC time>; `all`
# puts each phase in $OUT/<phase>/: at most 7 files come back.
# Knobs (environment): BUDGET_ALL (540), TESTS_BUDGET (230), HOST_BUDGET (45), BUDGET (a phase's, 270),
# BUILD_DIR, GPU_TRAIN_DATA, TRAIN_BACKEND (cuda), TRAIN_CONFIG (configs/paper-6.78b.yaml), TRAIN_STEPS
# (8), TRAIN_MB (64), PROTOCOL_OPTIMIZERS (skewadam adamw), OPTIMIZERS (lion muon adafactor),
# LAST_OPTIMIZERS (galore-paper), OPT_STEPS (3), TINY_OPTIMIZERS (skewadam adamw lion muon muon-kj
# adafactor galore galore-paper), TINY_STEPS (20), ARCH_STEPS (20), ARCH_SETS (more --set for the
# architectures' runs; the dry run shortens their sequences). Every optimizer name must be a
# built-in or a key of the config's optimizers:.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SELF=$ROOT/bench/gpu_check.sh
CARRY=${CARRY:-build-gpu/carry}
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck source=bench/gpu_carry.sh
source bench/gpu_carry.sh

PHASE=${1:-}
case "$PHASE" in
    --prepare|prepare|tests|bench|host|all|dry-run|check-carry) ;;
    *) echo "usage: bench/gpu_check.sh --prepare | check-carry | all | tests | bench | host | dry-run" >&2; exit 2 ;;
esac

# ---- here: build and stage the carry
prepare() {
    local data=${GPU_TRAIN_DATA:-data/prepared/quickstart}
    if [[ ! -f "$data/manifest.json" ]]; then
        echo "gpu_check --prepare: no prepared shards in $data for the training sections; make them with" >&2
        echo "  scripts/fetch_data.sh && $BUILD_DIR/tools/skew prepare --input data/corpus --out $data --tokenizer data/tokenizer" >&2
        echo "or point GPU_TRAIN_DATA at a prepared folder" >&2
        return 1
    fi
    if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
        cmake -S . -B "$BUILD_DIR" -DSKEW_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null || return 1
    fi
    local archs
    archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
    if [[ -z "$archs" || "$archs" != *90* ]]; then
        echo "gpu_check --prepare: $BUILD_DIR is not a CUDA build for sm_90 (CMAKE_CUDA_ARCHITECTURES '$archs')" >&2
        echo "--> HINT: bash scripts/build.sh (CUDA toolkit present), or BUILD_DIR=build-gpu with -DCMAKE_CUDA_ARCHITECTURES=90a" >&2
        return 1
    fi
    cmake --build "$BUILD_DIR" -j"${JOBS:-$(nproc)}" --target test_gpu bench_gpu_ops backend_ops skew >/dev/null || return 1
    carry_stage "$BUILD_DIR" "$CARRY" "$data" || return 1
    echo "staged in $CARRY; on the GPU machine (carry [\"$CARRY\"], timeout_s 600): bash bench/gpu_check.sh all"
}

if [[ "$PHASE" == --prepare || "$PHASE" == prepare ]]; then prepare; exit $?; fi
if [[ "$PHASE" == check-carry ]]; then
    carry_check "$CARRY" || exit 1
    if why=$(carry_matches_tree "$CARRY"); then
        echo "  built from this tree: $why"
    else
        echo "gpu_check check-carry: $why" >&2
        exit 1
    fi
    exit 0
fi

# ---- dry run (no GPU): stage from BUILD_DIR with the fixture shards, run `all` on the CPU
if [[ "$PHASE" == dry-run ]]; then
    set -e
    DRY=$(mktemp -d "${TMPDIR:-/tmp}/skew-gpu-dry.XXXXXX")
    "$BUILD_DIR/tools/skew" prepare --input tests/fixtures/train/sample.jsonl --out "$DRY/data" \
        --tokenizer tests/fixtures/data/gpt2 --no-progress >/dev/null
    CARRY="$DRY/carry" GPU_TRAIN_DATA="$DRY/data" BUILD_DIR="$BUILD_DIR" prepare
    set +e
    rc=0
    cmd=(env CARRY="$DRY/carry" OUT="$DRY/out" TRAIN_BACKEND=cpu TRAIN_CONFIG=configs/tiny.yaml TRAIN_STEPS=3
         OPT_STEPS=2 TRAIN_MB=2 TINY_STEPS=3 ARCH_STEPS=3 ARCH_SETS="--set train.seq_len=32" MEM_MB=1 DEFERRED_MB=1
         TINY_OPTIMIZERS="skewadam muon galore-paper"
         SKEW_CARRY_UNPACK=python SKEW_GPU_DRY_RUN=1 bash bench/gpu_check.sh all)
    # the GPU image has no Open MPI: hide the system's where a mount namespace can be made
    if unshare -m true 2>/dev/null; then
        unshare -m bash -c 'for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /etc/openmpi /usr/share/openmpi; do
                                [[ -d $d ]] && mount --bind "$(mktemp -d)" "$d"; done
                            f=$(mktemp); for b in /usr/bin/orterun /usr/bin/orted; do [[ -e $b ]] && mount --bind "$f" "$b"; done
                            exec "$@"' _ "${cmd[@]}"
    else
        echo "gpu_check dry-run: no mount namespace here; the system's Open MPI stays visible" >&2
        "${cmd[@]}"
    fi
    arc=$?
    echo "---- dry run of all (exit $arc): $DRY/out/summary.txt"
    cat "$DRY/out/summary.txt"
    (( arc != 0 )) && rc=1
    # what comes back from the device tool: at most 8 files, at most 2 folders down
    nfiles=$(find "$DRY/out" -type f | wc -l)
    (( nfiles <= 8 )) || { echo "gpu_check dry-run: $nfiles files under OUT (at most 8 come back)" >&2; rc=1; }
    for phase in tests bench host; do
        S=$DRY/out/$phase/summary.txt
        [[ -f "$S" ]] || { echo "gpu_check dry-run: no $phase/summary.txt" >&2; rc=1; continue; }
        [[ -f "$DRY/out/$phase/$phase.tar.gz" ]] || { echo "gpu_check dry-run: no $phase/$phase.tar.gz" >&2; rc=1; }
        # every section said what it did: one line per test_gpu file, and the sections that run here passed
        case $phase in
            tests)
                want=("carry: passed" "backend_ops test: skipped" "backend_ops test cublas_grouped: skipped"
                      "olmoe-tiny CUDA vs CPU: passed" "qwen3-style CUDA vs CPU: passed" "tiny CUDA vs CPU: passed"
                      "mpirun -np 1 (.*): passed" "memcheck: skipped")
                for f in $("$BUILD_DIR/tests/test_gpu" -# --list-tags 2>/dev/null | sed -n 's/.*\[#\([A-Za-z0-9_]*\)\].*/\1/p'); do
                    want+=("test_gpu $f: skipped")
                done ;;
            bench)
                want=("carry: passed" "protocol skewadam .*: passed" "protocol adamw .*: passed" "bench_gpu_ops: skipped"
                      "optimizer lion .*: passed" "optimizer muon .*: passed" "optimizer adafactor .*: passed"
                      "memory .*expert_grads deferred.*: passed" "memory .*recompute none: passed"
                      "optimizer galore-paper .*: passed") ;;
            host) want=("carry: passed" "hf peer: (skipped|passed)") ;;
        esac
        for w in "${want[@]}"; do
            grep -Eq "^  $w\$" "$S" || { echo "gpu_check dry-run: no line '$w' in the $phase summary" >&2; rc=1; }
        done
    done
    [[ -z "${KEEP_DRY:-}" ]] && rm -rf "$DRY"
    echo "gpu_check dry-run: $([[ $rc == 0 ]] && echo passed || echo FAILED)"
    exit $rc
fi

# ======================================================================== all: the one device call
if [[ "$PHASE" == all ]]; then
    BASE=${OUT:-$ROOT/bench/results/gpu-check-all-$(date -u +%Y%m%dT%H%M%SZ)}
    mkdir -p "$BASE"
    BUDGET_ALL=${BUDGET_ALL:-540}
    T0=$(date +%s)
    elapsed() { echo $(( $(date +%s) - T0 )); }
    # unpack the carry once for the three phases (carry_env exports SKEW_CARRY_DIR; each phase reuses it)
    if [[ -f "$CARRY/payload.tar.xz" ]]; then
        carry_env "$CARRY" || { echo "gpu_check all: the carry does not unpack" | tee "$BASE/summary.txt"; exit 3; }
    fi
    CHILD=""
    LINES=()  # one verdict line per phase
    write_summary() {
        {
            echo "gpu_check all: $(elapsed)s of ${BUDGET_ALL}s; each phase's sections in <phase>/summary.txt, logs in <phase>/<phase>.tar.gz"
            printf '%s\n' "${LINES[@]}"
            for p in tests bench host; do
                [[ -f "$BASE/$p/summary.txt" ]] || continue
                echo "---- $p"
                sed -n '/^\[[0-9]*s\] gpu_check '"$p"': \(every section\|FAILED\)/,$p' "$BASE/$p/summary.txt"
            done
        } > "$BASE/summary.txt"
    }
    on_term_all() {
        trap '' TERM INT
        LINES+=("all: ended by SIG$1 after $(elapsed)s")
        [[ -n "$CHILD" ]] && kill -TERM "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
        write_summary
        exit 1
    }
    trap 'on_term_all TERM' TERM
    trap 'on_term_all INT' INT
    # run_phase NAME BUDGET: the phase under a time limit 10 s past its budget (then SIGTERM: it writes
    # its summary and archive), SIGKILL 15 s after that
    verdict=0
    run_phase() {
        local name=$1 budget=$2 rc t0
        t0=$(date +%s)
        if (( budget < 20 )); then
            LINES+=("phase $name: skipped (${budget}s left of ${BUDGET_ALL}s)")
            return
        fi
        OUT="$BASE/$name" BUDGET=$budget timeout -s TERM -k 15 $(( budget + 10 )) bash "$SELF" "$name" &
        CHILD=$!
        wait "$CHILD"
        rc=$?
        CHILD=""
        (( rc != 0 )) && verdict=1
        LINES+=("phase $name: exit $rc after $(( $(date +%s) - t0 ))s of a ${budget}s budget$( ((rc == 124)) && echo ' (its time limit)')")
        write_summary
    }
    HOST_BUDGET=${HOST_BUDGET:-45}
    run_phase tests "${TESTS_BUDGET:-230}"
    run_phase bench $(( BUDGET_ALL - $(elapsed) - HOST_BUDGET - 25 ))
    run_phase host $(( BUDGET_ALL - $(elapsed) - 15 ))
    write_summary
    cat "$BASE/summary.txt"
    exit $verdict
fi

# ======================================================================== a phase (on the GPU machine, or dry)
OUT=${OUT:-$ROOT/bench/results/gpu-check-$PHASE-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
START=$(date +%s)
BUDGET=${BUDGET:-270}
DRY=${SKEW_GPU_DRY_RUN:-}
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# tmo WANT [RESERVE]: seconds a step may take: WANT, or what is left of the budget less RESERVE (>= 5)
tmo() {
    local want=$1 room=$(( $(left) - ${2:-0} ))
    (( room < want )) && want=$room
    (( want < 5 )) && want=5
    echo "$want"
}
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt"; }
RESULTS=()  # "section: verdict" lines for the end of summary.txt
SECTION="start"
section() { SECTION=$1; }
result() {  # result SECTION VERDICT: one summary line now, the section's verdict word again at the end
    RESULTS+=("$1: $(echo "$2" | awk '{print $1}' | tr -d ':,')")
    log "$1: $2"
}

# bg COMMAND...: run a command as a child and wait for it, so that SIGTERM reaches the phase's trap at
# once (bash runs a trap only after the foreground command ends; `wait` returns early)
CHILD=""
bg() {
    "$@" &
    CHILD=$!
    wait "$CHILD"
    local rc=$?
    CHILD=""
    return $rc
}

FINISHED=""
finish() {
    [[ -n "$FINISHED" ]] && exit 1
    FINISHED=1
    trap '' TERM INT
    local verdict=0 r
    for r in "${RESULTS[@]}"; do [[ "$r" == *": FAILED" || "$r" == *": TIMEOUT" || "$r" == *": KILLED" ]] && verdict=1; done
    log "gpu_check $PHASE: $( (( verdict == 0 )) && echo "every section passed" || echo "FAILED: see above") ($(left)s of ${BUDGET}s left)"
    printf '%s\n' "${RESULTS[@]}" | sed 's/^/  /' >> "$OUT/summary.txt"
    # one archive of every log beside summary.txt (the device tool brings back a flat, small folder):
    # tar and gzip, else Python's tarfile; GNU tar's exit 1 ("file changed as we read it") still
    # leaves a whole archive
    local made=""
    if command -v gzip >/dev/null; then
        tar -C "$OUT" --exclude="./$PHASE.tar.gz.part" -czf "$OUT/$PHASE.tar.gz.part" . 2> "$OUT/tar.err"
        (( $? <= 1 )) && made=1
    fi
    if [[ -z "$made" ]]; then
        python3 -c 'import os, sys, tarfile
out, part = sys.argv[1], sys.argv[2]
with tarfile.open(part, "w:gz") as t:
    for n in sorted(os.listdir(out)):
        if n != os.path.basename(part):
            t.add(os.path.join(out, n), arcname="./" + n)' "$OUT" "$OUT/$PHASE.tar.gz.part" 2>> "$OUT/tar.err" && made=1
    fi
    if [[ -n "$made" ]]; then
        mv "$OUT/$PHASE.tar.gz.part" "$OUT/$PHASE.tar.gz"
        find "$OUT" -mindepth 1 -maxdepth 1 ! -name "$PHASE.tar.gz" ! -name summary.txt -exec rm -rf {} +
    else
        log "could not archive $OUT: $(head -2 "$OUT/tar.err")"
        verdict=1
    fi
    exit $verdict
}

# Ended from outside (the time limit of `all`, a person): stop what runs, keep what was written.
on_term() {
    trap '' TERM INT
    RESULTS+=("$PHASE: KILLED")
    log "KILLED: the phase was ended by SIG$1 after $(( $(date +%s) - START ))s (budget ${BUDGET}s) during '$SECTION'; the sections after it did not run"
    # every child of the phase (a `timeout` passes the signal on to its command)
    local jobs_left
    jobs_left=$(jobs -p)
    [[ -n "$CHILD" ]] && kill -TERM "$CHILD" 2>/dev/null
    [[ -n "$jobs_left" ]] && kill -TERM $jobs_left 2>/dev/null
    sleep 2
    jobs_left=$(jobs -p)
    [[ -n "$jobs_left" ]] && kill -KILL $jobs_left 2>/dev/null
    finish
}
trap 'on_term TERM' TERM
trap 'on_term INT' INT

if [[ -f "$CARRY/payload.tar.xz" ]]; then
    carry_env "$CARRY" || { log "FAILED: the carry does not unpack"; result carry FAILED; finish; }
    BIN=$SKEW_CARRY_BIN
    COMMIT=$(head -1 "$CARRY/COMMIT" 2>/dev/null || echo unknown)
    MODE=carry
else
    BUILD_ABS=$(cd "$BUILD_DIR" 2>/dev/null && pwd || echo "$ROOT/$BUILD_DIR")
    BIN=$BUILD_ABS/bin-links
    mkdir -p "$BIN"
    ln -sf "$BUILD_ABS/tools/skew" "$BIN/skew"
    ln -sf "$BUILD_ABS/tests/test_gpu" "$BIN/test_gpu"
    ln -sf "$BUILD_ABS/bench/bench_gpu_ops" "$BIN/bench_gpu_ops"
    ln -sf "$BUILD_ABS/tests/backend_ops/backend_ops" "$BIN/backend_ops"
    export SKEW_BINARY="$BIN/skew" SKEW_SOURCE_DIR="$ROOT"
    COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    MODE=build
fi
{
    echo "phase: $PHASE$([[ -n "$DRY" ]] && echo ' (dry run, no GPU)')"
    echo "date: $(date -u)"
    echo "commit: $COMMIT (binaries: $MODE)"
    cat "$CARRY/COMMIT" 2>/dev/null | sed 1d
    nvidia-smi 2>&1 || true
    echo "mpirun: $(command -v mpirun || echo 'not found')"
    echo "nproc: $(nproc)"
    echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
} > "$OUT/env.txt"
log "gpu_check $PHASE: commit $COMMIT, binaries from $MODE, results in $OUT, budget ${BUDGET}s"
device=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
log "device: ${device:-none visible}"
# the figures are the carry's commit's only when the scripts and configs here are that commit's too
if [[ $MODE == carry ]]; then
    if why=$(carry_matches_tree "$CARRY"); then result carry "passed: $why"; else result carry "FAILED: $why"; fi
fi

# Every binary loads, or the phase ends here naming what is missing.
for b in skew test_gpu bench_gpu_ops backend_ops; do
    missing=$(ldd "$BIN/$b" 2>&1 | grep "not found")
    if [[ -n "$missing" ]]; then
        result load "FAILED: $b does not load: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
        finish
    fi
done
SKEW="$BIN/skew"
TEST="$BIN/test_gpu"
TRAIN_BACKEND=${TRAIN_BACKEND:-cuda}
TRAIN_DATA=""
for d in "$CARRY/data/quickstart" data/prepared/quickstart; do
    [[ -f "$d/manifest.json" ]] && { TRAIN_DATA=$(cd "$d" && pwd); break; }
done
SEPARATOR=""
[[ -n "$TRAIN_DATA" ]] && SEPARATOR=$(sed -n 's/.*"separator"[[:space:]]*:[[:space:]]*"\([a-z]*\)".*/\1/p' "$TRAIN_DATA/manifest.json" | head -1)

# run_train OPTIMIZER STEPS CAP DIR CONFIG [--set KEY=VALUE ...]: one training run, killed once
# its metrics are written after the last step (the checkpoints it would write next only cost time)
# or at CAP seconds; its small files land in DIR. Exit 0 when every step was logged with metrics.
run_train() {
    local o=$1 steps=$2 cap=$3 T=$4 config=$5
    shift 5
    mkdir -p "$T"
    local RUN_PARENT RUN_DIR
    RUN_PARENT=$(mktemp -d "${TMPDIR:-/tmp}/skew-gpu-train.XXXXXX")
    RUN_DIR="$RUN_PARENT/run"
    local SETS=(--set "runtime.backend=$TRAIN_BACKEND" --set "data.dir=$TRAIN_DATA" --set "train.steps=$steps"
                --set "train.eval_every=$steps" --set train.eval_batches=1 --set train.log_every=1
                --set train.checkpoint_every=1000000 "$@")
    [[ -n "$SEPARATOR" ]] && SETS+=(--set "data.separator=$SEPARATOR")
    printf 'commit: %s\ndevice: %s\ncommand: skew train %s --optimizers %s --plain %s\n' "$COMMIT" "$device" "$config" "$o" \
        "${SETS[*]}" > "$T/info.txt"
    "$SKEW" plan "$config" --optimizer "$o" --json "${SETS[@]}" > "$T/plan.json" 2> "$T/plan.err"
    local SMI_PID=""
    if command -v nvidia-smi >/dev/null && [[ -z "$DRY" ]]; then
        nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,power.draw --format=csv -lms 500 > "$T/nvidia-smi.csv" 2>&1 &
        SMI_PID=$!
    fi
    local t0 pid ended=exited logged=0 rc
    t0=$(date +%s)
    "$SKEW" train "$config" --optimizers "$o" --out "$RUN_DIR" --plain "${SETS[@]}" > "$T/train.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        logged=$(cat "$RUN_DIR/steps_$o.jsonl" 2>/dev/null | wc -l)
        if [[ -f "$RUN_DIR/metrics_$o.json" ]] && (( logged >= steps )); then
            kill -KILL "$pid" 2>/dev/null; ended="done (killed after its metrics)"; break
        fi
        if (( $(date +%s) - t0 >= cap )); then kill -KILL "$pid" 2>/dev/null; ended="TIMEOUT at ${cap}s after $logged steps"; break; fi
        sleep 0.5
    done
    { wait "$pid"; } 2>/dev/null
    rc=$?
    [[ "$ended" == done* ]] && rc=0
    [[ "$ended" == TIMEOUT* ]] && rc=124
    [[ -n "$SMI_PID" ]] && kill "$SMI_PID" 2>/dev/null
    cp "$RUN_DIR"/metrics_*.json "$RUN_DIR"/steps_*.jsonl "$RUN_DIR"/config.yaml "$T/" 2>/dev/null
    rm -rf "$RUN_PARENT"
    echo "ended: $ended after $(( $(date +%s) - t0 ))s, exit $rc" >> "$T/info.txt"
    if (( rc != 0 )); then
        log "  $o: $ended, exit $rc; the log ends:"
        tail -3 "$T/train.log" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
    fi
    return $rc
}

# phase_line DIR OPTIMIZER: median phase times of a run (every step after the first)
phase_line() {
    python3 - "$1" "$2" <<'EOF'
import json, os, statistics, sys
T, o = sys.argv[1], sys.argv[2]
try:
    rows = [json.loads(l) for l in open(os.path.join(T, f"steps_{o}.jsonl")) if l.strip()]
except (OSError, ValueError):
    rows = []
later = rows[1:] or rows
def med(k):
    v = [r[k] for r in later if isinstance(r.get(k), (int, float))]
    return round(statistics.median(v), 1) if v else None
m = {}
try:
    m = json.load(open(os.path.join(T, f"metrics_{o}.json")))
except (OSError, ValueError):
    pass
gib = lambda b: None if not isinstance(b, (int, float)) else round(b / 2**30, 2)
print(f"{len(rows)} steps; median ms: step {med('step_ms')}, fwd_bwd {med('fwd_bwd_ms')}, grad_norm {med('grad_norm_ms')}, "
      f"optimizer {med('optimizer_ms')}; tokens/s {med('tokens_per_sec')}; loss {rows[-1].get('lm_loss') if rows else None}; "
      f"peak {gib(m.get('peak_memory_bytes'))} GiB, plan {gib(m.get('plan_bytes'))} GiB")
EOF
}

# backend_vs_cpu NAME CONFIG OPTIMIZERS STEPS CAP RESERVE [--set KEY=VALUE ...]: CONFIG trained STEPS
# steps per optimizer once on TRAIN_BACKEND and once on the CPU (same initialization, same batches;
# the CPU run on the host's cores beside the GPU run), the step logs compared by
# bench/compare_step_logs.py: the LM loss within 1e-3 and the gradient norm within 1e-2 relative at
# every step (its docstring says why).
backend_vs_cpu() {
    local name=$1 config=$2 optimizers=$3 steps=$4 want=$5 reserve=$6
    shift 6
    section "$name CUDA vs CPU"
    if [[ -z "$TRAIN_DATA" ]]; then
        result "$name CUDA vs CPU" "FAILED (no prepared shards)"
        return
    fi
    local sets=(--set "data.dir=$TRAIN_DATA" --set "train.steps=$steps" --set "train.eval_every=$steps"
                --set train.eval_batches=1 --set train.log_every=1 --set train.checkpoint_every=1000000 "$@")
    [[ -n "$SEPARATOR" ]] && sets+=(--set "data.separator=$SEPARATOR")
    local opts cap D=$OUT/$name cpu_pid gpu_rc cpu_rc cmp_rc
    opts=$(echo "$optimizers" | tr ' ' ',')
    mkdir -p "$D"
    cap=$(tmo "$want" "$reserve")
    echo "command: skew train $config --optimizers $opts --plain ${sets[*]} (--set runtime.backend=cpu | $TRAIN_BACKEND)" > "$D/info.txt"
    timeout -k 5 "$cap" "$SKEW" train "$config" --optimizers "$opts" --plain --out "$D/cpu" \
        --set runtime.backend=cpu "${sets[@]}" > "$D/cpu.log" 2>&1 &
    cpu_pid=$!
    bg timeout -k 5 "$cap" "$SKEW" train "$config" --optimizers "$opts" --plain --out "$D/gpu" \
        --set "runtime.backend=$TRAIN_BACKEND" "${sets[@]}" > "$D/gpu.log" 2>&1
    gpu_rc=$?
    CHILD=$cpu_pid
    wait "$cpu_pid"
    cpu_rc=$?
    CHILD=""
    python3 bench/compare_step_logs.py "$D/cpu" "$D/gpu" --optimizers "$opts" --steps "$steps" \
        --json "$D/compare.json" > "$D/compare.txt" 2>&1
    cmp_rc=$?
    sed 's/^/    /' "$D/compare.txt" >> "$OUT/summary.txt"
    if (( gpu_rc != 0 || cpu_rc != 0 )); then
        result "$name CUDA vs CPU" "FAILED (train exit: $TRAIN_BACKEND $gpu_rc, cpu $cpu_rc)"
        tail -3 "$D/gpu.log" | sed 's/^/    /' >> "$OUT/summary.txt"
    elif (( cmp_rc == 0 )); then
        result "$name CUDA vs CPU" "passed ($steps steps, $(echo "$optimizers" | wc -w) optimizers, loss within 1e-3 and grad norm within 1e-2 relative)"
    else
        result "$name CUDA vs CPU" "FAILED (the step logs differ past 1e-3 / 1e-2)"
    fi
    rm -rf "$D/cpu/checkpoints" "$D/gpu/checkpoints"
}

# ======================================================================== phase: host
if [[ "$PHASE" == host ]]; then
    # ---- the Hugging Face peer check (bench/hf_peer_check.py, docs/huggingface.md): the tiny checkpoints
    # and skew's export of their import in transformers against the reference logits, tokenizer.json
    # ids through tokenizers; on the host's CPU (the GPU image has transformers), skipped without it
    section "hf peer"
    mkdir -p "$OUT/hf_peer"
    bg timeout -k 5 "$(tmo 60 5)" python3 bench/hf_peer_check.py --skew "$SKEW" --out "$OUT/hf_peer/work" \
        > "$OUT/hf_peer/peer.log" 2>&1
    rc=$?
    rm -rf "$OUT/hf_peer/work"
    sed 's/^/    /' "$OUT/hf_peer/peer.log" | head -30 >> "$OUT/summary.txt"
    case $rc in
        0) result "hf peer" "passed ($(grep -c ': passed' "$OUT/hf_peer/peer.log") comparisons)" ;;
        77) result "hf peer" "skipped ($(head -1 "$OUT/hf_peer/peer.log" | sed 's/^hf peer: skipped (//; s/)$//'))" ;;
        124|137) result "hf peer" "TIMEOUT" ;;
        *) result "hf peer" "FAILED (exit $rc; $(grep -c ': FAILED' "$OUT/hf_peer/peer.log") comparisons failed)" ;;
    esac
    finish
fi

# ======================================================================== phase: tests
if [[ "$PHASE" == tests ]]; then
    # ---- the op table (tests/backend_ops, docs/backend-ops.md): every op on CUDA against the CPU,
    # the large rows included (the CUDA tiles, chunks, grid limits and layouts); then the grouped
    # expert GEMM's second algorithm (SKEW_GROUPED_GEMM=cublas_grouped) on its rows
    # table_test NAME CAP RESERVE LOG [ENV=VALUE] [backend_ops arguments...]: one summary line
    table_test() {
        local name=$1 cap lg=$OUT/$4 rc
        section "$name"
        cap=$(tmo "$2" "$3")
        shift 4
        local envs=()
        while [[ "${1:-}" == *=* ]]; do envs+=("$1"); shift; done
        bg env "${envs[@]}" timeout -k 5 "$cap" "$BIN/backend_ops" --mode test --backend cuda --large "$@" > "$lg" 2>&1
        rc=$?
        case $rc in
            0) result "$name" "passed: $(grep -c '^ok' "$lg") cases" ;;
            77) [[ -n "$DRY" ]] && result "$name" "skipped (no GPU, dry run)" || result "$name" "FAILED (no CUDA device visible)" ;;
            124|137) result "$name" "TIMEOUT after ${cap}s" ;;
            *) result "$name" "FAILED (exit $rc): $(tail -1 "$lg")"
               grep -E '^FAIL' "$lg" | head -20 | sed 's/^/    /' >> "$OUT/summary.txt" ;;
        esac
    }
    table_test "backend_ops test" 90 130 backend_ops_test.log
    table_test "backend_ops test cublas_grouped" 20 120 backend_ops_test_cublas_grouped.log SKEW_GROUPED_GEMM=cublas_grouped \
        --filter moe_matmul

    # ---- the new architectures trained on CUDA against the CPU (docs/architectures.md): OLMoE's
    # shape (configs/olmoe-tiny.yaml: RoPE, RMSNorm, QK-norm over the full projection, top-8 of 64
    # without renormalization, every block an MoE, untied head) and a Qwen3-style variant of it
    # (QK-norm per head, head_dim 64 over d_model 128, GQA 4/2, top-8 renormalized, one shared expert
    # behind the sigmoid gate); SkewAdam and AdamW
    ARCH_STEPS=${ARCH_STEPS:-20}
    read -r -a arch_sets <<< "${ARCH_SETS:-}"  # the dry run's shorter sequences (its fixture shards are small)
    backend_vs_cpu olmoe-tiny configs/olmoe-tiny.yaml "skewadam adamw" "$ARCH_STEPS" 50 110 "${arch_sets[@]}"
    backend_vs_cpu qwen3-style configs/olmoe-tiny.yaml "skewadam adamw" "$ARCH_STEPS" 50 90 "${arch_sets[@]}" \
        --set model.qk_norm=per_head --set model.head_dim=64 --set model.n_kv_heads=2 --set model.normalize_top_k=true \
        --set model.n_shared_experts=1 --set model.d_shared_expert=128 --set model.shared_expert_gate=sigmoid

    # test_gpu by source file, the least-known first: kernels and paths never run on a GPU, then
    # the ones that passed at 8f5fa14. Files not listed run last (none is left out).
    # (The op tests of 8f5fa14, test_attention, test_cross_entropy, test_dense_ops and test_moe, are
    # rows of the op table now: docs/backend-ops.md "Old tests -> rows".)
    ORDER=(test_init test_optim_cuda test_grouped_gemm test_muon test_galore test_cublaslt_util test_nccl_args
           test_train_step test_deferred_experts test_recompute test_arena_canary test_inference test_zero_cuda
           test_expert_shard_cuda test_nccl_overlap test_nccl_world1 test_range_times)
    LATER=(test_moe_block)
    mapfile -t ALL < <("$TEST" -# --list-tags 2>/dev/null | sed -n 's/.*\[#\([A-Za-z0-9_]*\)\].*/\1/p')
    OTHERS=()
    for f in "${ALL[@]}"; do
        [[ " ${ORDER[*]} ${LATER[*]} " == *" $f "* ]] || OTHERS+=("$f")
    done
    (( ${#ALL[@]} == 0 )) && result "test_gpu --list-tags" "FAILED (no test files listed)"
    mkdir -p "$OUT/test_gpu"
    # run_group FILE CAP RESERVE: one test_gpu process for the file's test cases
    run_group() {
        local f=$1 cap t0 rc lg="$OUT/test_gpu/$1.log" line
        section "test_gpu $f"
        if (( $(left) - $3 < 10 )); then result "test_gpu $f" "skipped (too little time left: $(left)s)"; return; fi
        cap=$(tmo "$2" "$3")
        t0=$(date +%s)
        bg timeout -k 5 "$cap" "$TEST" -# "[#$f]" --durations yes > "$lg" 2>&1
        rc=$?
        line=$(grep -E "^(All tests passed|test cases:)" "$lg" | tail -1)
        if (( rc == 77 )); then
            [[ -n "$DRY" ]] && result "test_gpu $f" "skipped (no GPU, dry run)" || result "test_gpu $f" "FAILED (no CUDA device visible)"
        elif (( rc == 124 || rc == 137 )); then
            result "test_gpu $f" "TIMEOUT after ${cap}s ($(grep -c ' s: ' "$lg") test cases finished)"
        elif (( rc == 0 )); then
            result "test_gpu $f" "passed: ${line:-?} ($(( $(date +%s) - t0 ))s)"
        else
            result "test_gpu $f" "FAILED (exit $rc): ${line:-no summary}"
            grep -B2 -A6 -E "FAILED:|REQUIRE|CHECK\(" "$lg" | head -40 | sed 's/^/    /' >> "$OUT/summary.txt"
        fi
    }
    for f in "${ORDER[@]}"; do
        [[ " ${ALL[*]} " == *" $f "* ]] || { result "test_gpu $f" "FAILED (no such test file in test_gpu)"; continue; }
        case $f in
            test_optim_cuda|test_nccl_world1|test_nccl_overlap) cap=60 ;;
            *) cap=40 ;;
        esac
        run_group "$f" "$cap" 60  # 60 s stay for the per-optimizer comparison, memcheck and the rest
    done

    # ---- CUDA against the CPU: TINY_STEPS steps of configs/tiny.yaml per optimizer
    backend_vs_cpu tiny configs/tiny.yaml "${TINY_OPTIMIZERS:-skewadam adamw lion muon muon-kj adafactor galore galore-paper}" \
        "${TINY_STEPS:-20}" 60 40

    # ---- mpirun from the carry: one rank of a tiny run (the NCCL tests above use the same launcher)
    section "mpirun -np 1"
    if command -v mpirun >/dev/null && [[ -n "$TRAIN_DATA" ]]; then
        mkdir -p "$OUT/mpirun"
        mpi_sets=(--set "data.dir=$TRAIN_DATA" --set train.steps=2 --set train.eval_every=2 --set train.eval_batches=1
                  --set train.log_every=1 --set train.checkpoint_every=1000000)
        [[ -n "$SEPARATOR" ]] && mpi_sets+=(--set "data.separator=$SEPARATOR")
        bg env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none \
            timeout -k 5 "$(tmo 30 20)" mpirun --oversubscribe -np 1 "$SKEW" train configs/tiny.yaml --optimizers adamw \
            --plain --out "$OUT/mpirun/run" --set "runtime.backend=$TRAIN_BACKEND" "${mpi_sets[@]}" > "$OUT/mpirun/train.log" 2>&1
        rc=$?
        rm -rf "$OUT/mpirun/run/checkpoints"
        logged=$(cat "$OUT/mpirun/run/steps_adamw.jsonl" 2>/dev/null | wc -l)
        nccl=$(grep -o "gradients summed over NCCL.*" "$OUT/mpirun/train.log" | head -1)
        if (( rc == 0 && logged == 2 )); then
            result "mpirun -np 1 ($(command -v mpirun))" "passed: 2 steps of tiny.yaml on $TRAIN_BACKEND${nccl:+, $nccl}"
        else
            result "mpirun -np 1 ($(command -v mpirun))" "FAILED (exit $rc)"
            tail -4 "$OUT/mpirun/train.log" | sed 's/^/    /' >> "$OUT/summary.txt"
        fi
    else
        result "mpirun -np 1" "FAILED (no mpirun on PATH: the carry has no Open MPI)"
    fi

    # ---- memcheck of the kernels that never ran (Catch2 v2: comma-separated names are OR-ed)
    # (the op kernels through the op table's rows: one backend_ops process per filter, after test_gpu's)
    section memcheck
    MEMCHECK_TESTS="CUDA optimizer step matches the CPU step*,CUDA Muon (paper form*"
    MEMCHECK_OPS="rope rmsnorm bias_add sigmoid_gate init_normal attention moe_matmul lm_head sum_squares"
    if [[ -n "$DRY" ]]; then
        result memcheck "skipped (no GPU, dry run)"
    elif ! command -v compute-sanitizer >/dev/null; then
        result memcheck "FAILED (no compute-sanitizer on PATH)"
    elif (( $(left) < 25 )); then
        result memcheck "skipped (too little time left: $(left)s)"
    else
        cap=$(tmo 60 10)
        t_mc=$(date +%s)
        bg timeout -k 5 "$cap" compute-sanitizer --tool memcheck --error-exitcode 9 "$TEST" "$MEMCHECK_TESTS" > "$OUT/memcheck.log" 2>&1
        rc=$?
        ran=$(grep -E "^(All tests passed|test cases:)" "$OUT/memcheck.log" | tail -1)
        for op in $MEMCHECK_OPS; do
            (( rc != 0 )) && break
            left_mc=$(( cap - ($(date +%s) - t_mc) ))
            (( left_mc < 5 )) && { rc=124; break; }
            bg timeout -k 5 "$left_mc" compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/backend_ops" --mode test \
                --backend cuda --filter "$op" >> "$OUT/memcheck.log" 2>&1
            rc=$?
            ran="$ran; backend_ops $op: $(grep -c '^ok' "$OUT/memcheck.log") ok lines so far"
        done
        if (( rc == 0 )) && [[ -n "$ran" ]]; then
            result memcheck "passed, 0 errors: $ran"
        elif (( rc == 124 || rc == 137 )); then
            result memcheck "TIMEOUT after ${cap}s: ${ran:-no test case finished}"
        else
            result memcheck "FAILED (exit $rc): ${ran:-no test case ran}"
            grep -m 12 -E "=========" "$OUT/memcheck.log" | sed 's/^/    /' >> "$OUT/summary.txt"
        fi
    fi

    # ---- what passed at 8f5fa14, then any file not listed above
    for f in "${LATER[@]}" "${OTHERS[@]}"; do run_group "$f" 30 0; done
    finish
fi

# ======================================================================== phase: bench
TRAIN_CONFIG=${TRAIN_CONFIG:-configs/paper-6.78b.yaml}
TRAIN_STEPS=${TRAIN_STEPS:-8}
TRAIN_MB=${TRAIN_MB:-64}
OPT_STEPS=${OPT_STEPS:-3}
PROTOCOL_OPTIMIZERS=${PROTOCOL_OPTIMIZERS:-skewadam adamw}
OPTIMIZERS=${OPTIMIZERS:-lion muon adafactor}
LAST_OPTIMIZERS=${LAST_OPTIMIZERS:-galore-paper}
if [[ -z "$TRAIN_DATA" ]]; then
    result bench "FAILED (no prepared shards: $CARRY/data/quickstart)"
    finish
fi
# known ARRAY OPTIMIZER...: the names the config knows (a built-in or a key of its optimizers:) into
# ARRAY, a FAILED line for each other
known() {
    local -n into=$1
    shift
    into=()
    local o
    for o in "$@"; do
        if "$SKEW" plan "$TRAIN_CONFIG" --optimizer "$o" > /dev/null 2> "$OUT/plan-$o.err"; then
            into+=("$o")
        else
            result "optimizer $o" "FAILED (not an optimizer of $TRAIN_CONFIG: $(head -1 "$OUT/plan-$o.err"))"
        fi
    done
}
# shellcheck disable=SC2086
{ known RUN_PROTOCOL $PROTOCOL_OPTIMIZERS; known RUN_OPTIMIZERS $OPTIMIZERS; known RUN_LAST $LAST_OPTIMIZERS; }

# ---- the paper protocol first: TRAIN_STEPS steps at microbatch TRAIN_MB per protocol optimizer
summary_json() {  # summary_json DIR OPTIMIZER: bench/summarize_gpu_train.py's one-line verdict
    python3 bench/summarize_gpu_train.py "$1" --optimizer "$2" --out "$1/summary.json" > /dev/null 2> "$1/summary.err"
    python3 - "$1/summary.json" <<'EOF' 2>/dev/null
import json, sys
s = json.load(open(sys.argv[1]))
m = s["memory"]
print(f"{s['steps_measured']} steps measured, median {s['tokens_per_sec_median']} tokens/s, MFU {s['mfu']}, "
      f"phases {s['phase_ms_median']}, peak {m['measured_peak_gib']} GiB vs plan {m.get('plan_device_total_gib')} GiB "
      f"(arena {m['plan_peak_gib']}), targets {[(k, v['pass']) for k, v in s['targets'].items()]}")
EOF
}
for o in "${RUN_PROTOCOL[@]}"; do
    name="protocol $o ($TRAIN_STEPS steps, microbatch $TRAIN_MB)"
    section "$name"
    if (( $(left) < 50 )); then result "$name" "skipped (too little time left: $(left)s)"; continue; fi
    T="$OUT/protocol/$o"
    if run_train "$o" "$TRAIN_STEPS" "$(tmo 60 20)" "$T" "$TRAIN_CONFIG" --set "train.microbatch=$TRAIN_MB"; then
        result "$name" "passed: $(summary_json "$T" "$o")"
    else
        result "$name" "FAILED: $(phase_line "$T" "$o")"
    fi
done

# ---- the GPU micro-benchmarks: the optimizer steps at the paper's parameter set first, then every
# op's perf row of the op table at the paper's shapes (docs/backend-ops.md: time, TFLOP/s, GB/s,
# fraction of the measured roofline; the grouped expert GEMM under both algorithms), Muon, GaLore
section bench_gpu_ops
if [[ -n "$DRY" ]]; then
    result "bench_gpu_ops" "skipped (no GPU, dry run)"
elif (( $(left) < 60 )); then
    result "bench_gpu_ops" "skipped (too little time left: $(left)s)"
else
    cap=$(tmo 95 40)
    bg timeout -k 5 "$cap" "$BIN/bench_gpu_ops" "$OUT/bench_gpu_ops.jsonl" --quick --optim-config "$TRAIN_CONFIG" \
        > "$OUT/bench_gpu_ops.log" 2>&1
    rc=$?
    cat "$OUT/bench_gpu_ops.log" >> "$OUT/summary.txt"
    rows=$(wc -l < "$OUT/bench_gpu_ops.jsonl" 2>/dev/null)
    table=$(grep -c '"name": *"table ' "$OUT/bench_gpu_ops.jsonl" 2>/dev/null)
    case $rc in
        0) result "bench_gpu_ops" "passed ($rows rows, $table of the op table)" ;;
        124|137) result "bench_gpu_ops" "TIMEOUT after ${cap}s ($rows rows, $table of the op table)" ;;
        *) result "bench_gpu_ops" "FAILED (exit $rc; $rows rows, $table of the op table)" ;;
    esac
fi

# ---- the other optimizers a few steps on the paper's model (run_optimizer OPTIMIZER)
run_optimizer() {
    local o=$1 name="optimizer $1 ($OPT_STEPS steps, microbatch $TRAIN_MB)"
    section "$name"
    if (( $(left) < 45 )); then result "$name" "skipped (too little time left: $(left)s)"; return; fi
    if run_train "$o" "$OPT_STEPS" "$(tmo 35 10)" "$OUT/optim/$o" "$TRAIN_CONFIG" --set "train.microbatch=$TRAIN_MB"; then
        result "$name" "passed: $(phase_line "$OUT/optim/$o" "$o")"
    else
        result "$name" "FAILED: $(phase_line "$OUT/optim/$o" "$o")"
    fi
}
for o in "${RUN_OPTIMIZERS[@]}"; do run_optimizer "$o"; done

# ---- deferred expert gradients, train.recompute none, and the memory section (peak vs plan)
DEFERRED_MB=${DEFERRED_MB:-64 16}
MEM_MB=${MEM_MB:-8}
ITEMS=()
for mb in $DEFERRED_MB; do ITEMS+=("skewadam:$mb:deferred:block"); done
ITEMS+=("skewadam:$TRAIN_MB:stored:none")
for o in "${RUN_PROTOCOL[@]}" "${RUN_OPTIMIZERS[@]}"; do for mb in $MEM_MB; do ITEMS+=("$o:$mb:stored:block"); done; done
for item in "${ITEMS[@]}"; do
    IFS=: read -r o mb grads rc_mode <<< "$item"
    name="memory $o microbatch $mb, expert_grads $grads, recompute $rc_mode"
    section "$name"
    if (( $(left) < 25 )); then result "$name" "skipped (too little time left: $(left)s)"; continue; fi
    D="$OUT/memory/$o-mb$mb-$grads-$rc_mode"
    if run_train "$o" 2 "$(tmo 30 5)" "$D" "$TRAIN_CONFIG" --set "train.microbatch=$mb" \
            --set "train.expert_grads=$grads" --set "train.recompute=$rc_mode"; then
        result "$name" "passed: $(phase_line "$D" "$o")"
    else
        result "$name" "FAILED: $(phase_line "$D" "$o")"
    fi
done

# ---- last: the optimizers whose step is known to be slow on this model (galore-paper's host
# projector refresh), if time is left
for o in "${RUN_LAST[@]}"; do run_optimizer "$o"; done
finish
