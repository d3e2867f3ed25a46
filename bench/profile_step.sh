#!/usr/bin/env bash
# One command for a per-phase table of a few training steps on the CUDA backend, from the NVTX
# ranges (forward; per block: forward, recompute, backward; head; optimizer per tier and tensor).
# docs/profiling.md explains the tools and the table.
#
# Usage: bench/profile_step.sh [options] [CONFIG] [-- extra `skew train` arguments]
#   CONFIG              default configs/paper-6.78b.yaml
#   --tool ranges       (default) the ranges time themselves with CUDA events (SKEW_RANGE_TIMES):
#                       no profiler, no replay, seconds beyond the steps themselves
#   --tool ncu          Nsight Compute, one bounded metric (gpu__time_duration.sum), no cache
#                       flush or clock control, capture only inside --profile-steps
#                       (--profile-from-start off), then ncu's own per-NVTX summary
#   --tool nsys         Nsight Systems (where it is installed and works): capture range from
#                       --profile-steps, then `nsys stats` NVTX GPU projection
#   --steps A:B         profiled steps (default 3:3: steps 1-2 warm cuBLASLt and the allocator)
#   --optimizer NAME    default skewadam
#   --data DIR          prepared shards (default data/prepared/quickstart)
#   --out DIR           results (default runs/profile-<tool>); the table is DIR/phases.tsv
#   --skew PATH         the skew binary (default build/tools/skew)
set -euo pipefail

TOOL=ranges STEPS=3:3 OPT=skewadam DATA=data/prepared/quickstart OUT="" SKEW=build/tools/skew
CONFIG=configs/paper-6.78b.yaml
EXTRA=()
while (($#)); do
    case "$1" in
        --tool) TOOL=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --optimizer) OPT=$2; shift 2 ;;
        --data) DATA=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --skew) SKEW=$2; shift 2 ;;
        --) shift; EXTRA=("$@"); break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \?//; s/^#$//'; exit 0 ;;
        -*) echo "profile_step.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) CONFIG=$1; shift ;;
    esac
done
[[ "$TOOL" =~ ^(ranges|ncu|nsys)$ ]] || { echo "profile_step.sh: --tool is ranges, ncu or nsys, got '$TOOL'" >&2; exit 2; }
[[ "$STEPS" =~ ^[0-9]+:[0-9]+$ ]] || { echo "profile_step.sh: --steps wants A:B, got '$STEPS'" >&2; exit 2; }
FIRST=${STEPS%%:*} LAST=${STEPS##*:}
((FIRST >= 1 && LAST >= FIRST)) || { echo "profile_step.sh: --steps $STEPS: need 1 <= A <= B" >&2; exit 2; }
[[ -x "$SKEW" ]] || { echo "profile_step.sh: no skew binary at $SKEW (build it, or pass --skew)" >&2; exit 2; }
[[ -f "$CONFIG" ]] || { echo "profile_step.sh: no config $CONFIG" >&2; exit 2; }
[[ -d "$DATA" ]] || { echo "profile_step.sh: no prepared shards in $DATA (scripts/fetch_data.sh, skew prepare; or --data)" >&2; exit 2; }
OUT=${OUT:-runs/profile-$TOOL}
mkdir -p "$OUT"
RUN="$OUT/run"
rm -rf "$RUN"
TRAIN=("$SKEW" train "$CONFIG" --optimizers "$OPT" --out "$RUN" --plain
       --set runtime.backend=cuda --set "data.dir=$DATA" --set "train.steps=$((LAST + 1))"
       --set "train.eval_every=1000000" --set train.log_every=1 --set train.checkpoint_every=1000000
       --profile-steps "$STEPS" --stop-after "$LAST" "${EXTRA[@]}")
echo "profile_step.sh: ${TRAIN[*]}" | tee "$OUT/command.txt"
T0=$(date +%s)
case "$TOOL" in
    ranges)
        LAUNCH=(env "SKEW_RANGE_TIMES=$OUT/phases.tsv" "${TRAIN[@]}")
        ;;
    ncu)
        command -v ncu >/dev/null || { echo "profile_step.sh: ncu is not on PATH" >&2; exit 2; }
        # one metric, one pass: no kernel replay of memory, no cache flush, clocks left alone
        LAUNCH=(ncu --profile-from-start off --nvtx --metrics gpu__time_duration.sum --cache-control none
                --clock-control none --replay-mode kernel -f -o "$OUT/profile" "${TRAIN[@]}")
        ;;
    nsys)
        command -v nsys >/dev/null || { echo "profile_step.sh: nsys is not on PATH" >&2; exit 2; }
        LAUNCH=(nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop --trace=cuda,nvtx,cublas
                -f true -o "$OUT/profile" "${TRAIN[@]}")
        ;;
    *) echo "profile_step.sh: --tool is ranges, ncu or nsys, got '$TOOL'" >&2; exit 2 ;;
esac
# The run ends with a checkpoint (--stop-after), which for a large model is minutes of disk
# writes: once the trainer logs that the capture stopped (the table is written by then), the
# trainer process is killed, so the checkpoint is skipped; a profiler wrapping it then writes its report.
"${LAUNCH[@]}" > "$OUT/train.log" 2>&1 &
PID=$!
while kill -0 "$PID" 2>/dev/null; do
    if grep -q "profiler capture stopped" "$OUT/train.log" 2>/dev/null; then
        if [[ "$TOOL" == ranges ]]; then
            APP=$PID
        else
            APP=$(ps -o pid= --ppid "$PID" 2>/dev/null | head -1 | tr -d ' ' || true)
        fi
        [[ -n "$APP" ]] && kill -KILL "$APP" 2>/dev/null
        break
    fi
    sleep 1
done
wait "$PID" || true
if ! grep -q "profiler capture stopped" "$OUT/train.log"; then
    echo "profile_step.sh: the run ended before its capture window closed; last lines of $OUT/train.log:" >&2
    tail -5 "$OUT/train.log" >&2
    exit 1
fi
case "$TOOL" in
    ncu) ncu -i "$OUT/profile.ncu-rep" --print-summary per-nvtx --csv > "$OUT/phases.csv" ;;
    nsys) nsys stats --report nvtx_gpu_proj_sum --format csv -o "$OUT/phases" "$OUT/profile.nsys-rep" > /dev/null ;;
esac
echo "profile_step.sh: $TOOL took $(( $(date +%s) - T0 ))s (start-up and the unprofiled steps included)"
case "$TOOL" in
    ranges)
        # the phases: the step, forward / backward, per block, head, optimizer per tier
        awk -F'\t' '{ n = split($1, parts, "/") }
                    NR <= 2 || $1 ~ /^tier total/ || (n <= 3 && $1 !~ /\/optimizer\/optimizer /)' "$OUT/phases.tsv"
        echo "(every range, op level included: $OUT/phases.tsv)"
        ;;
    ncu) echo "per-NVTX summary: $OUT/phases.csv (report $OUT/profile.ncu-rep)" ;;
    nsys) ls "$OUT"/phases*.csv ;;
esac
