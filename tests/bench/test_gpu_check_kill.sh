#!/usr/bin/env bash
# ctest `bench`: a phase of bench/gpu_check.sh ended by SIGTERM from its time limit (as `all` ends a
# phase that overruns) stops the section it is in at once, says which in summary.txt, ends the
# summary with the verdict lines (the phase's own: KILLED) and still writes the archive of its logs,
# and leaves no process of it running. The tests phase runs dry (no GPU) on BUILD_DIR's binaries and
# the fixture shards; the signal comes while the new architectures train on the CPU.
#   bash tests/bench/test_gpu_check_kill.sh BUILD_DIR        exit 0 when every check holds, 77 unbuilt
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
for b in tools/skew tests/test_gpu bench/bench_gpu_ops tests/backend_ops/backend_ops; do
    [[ -x "$build/$b" ]] || { echo "skipped: $build/$b is not built"; exit 77; }
done
tmp=$(mktemp -d)
phase_pid=""
trap '[[ -n "$phase_pid" ]] && kill -KILL "$phase_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAILED: $*"; fails=1; }

# the shards where the phase looks for them ($CARRY/data/quickstart), no payload: the build's binaries
"$build/tools/skew" prepare --input tests/fixtures/train/sample.jsonl --out "$tmp/carry/data/quickstart" \
    --tokenizer tests/fixtures/data/gpt2 --no-progress > /dev/null || { echo "FAILED: skew prepare"; exit 1; }
out=$tmp/out
CARRY=$tmp/carry BUILD_DIR=$build OUT=$out TRAIN_BACKEND=cpu SKEW_GPU_DRY_RUN=1 TMPDIR=$tmp \
    timeout -s TERM 300 bash bench/gpu_check.sh tests > "$tmp/phase.log" 2>&1 &
phase_pid=$!

# wait for the sections before the architectures' training to be done (at most 120 s)
for _ in $(seq 240); do
    grep -q "backend_ops test cublas_grouped:" "$out/summary.txt" 2>/dev/null && break
    kill -0 "$phase_pid" 2>/dev/null || break
    sleep 0.5
done
grep -q "backend_ops test cublas_grouped:" "$out/summary.txt" 2>/dev/null || { cat "$tmp/phase.log"; fail "the phase never reached its training sections"; exit 1; }
# and for the first training section to have started its runs (its log exists; a loaded machine
# can take seconds between the two), then a moment into them
for _ in $(seq 240); do
    [[ -f "$out/olmoe-tiny/cpu.log" ]] && break
    kill -0 "$phase_pid" 2>/dev/null || break
    sleep 0.5
done
[[ -f "$out/olmoe-tiny/cpu.log" ]] || { cat "$tmp/phase.log"; fail "the phase never started the olmoe-tiny runs"; exit 1; }
sleep 1
# the time limit's signal: timeout passes SIGTERM on to the phase
t_kill=$(date +%s)
kill -TERM "$phase_pid"
wait "$phase_pid"
rc=$?
phase_pid=""
took=$(( $(date +%s) - t_kill ))

(( rc != 0 )) || fail "the killed phase exited 0"
(( took <= 15 )) || fail "the phase took ${took}s to end after SIGTERM (the section's own cap was 50 s)"
S=$out/summary.txt
[[ -f "$S" ]] || { fail "no summary.txt"; exit 1; }
grep -q "KILLED: the phase was ended by SIGTERM after .* during '.* CUDA vs CPU'" "$S" ||
    fail "summary.txt does not say that SIGTERM ended the phase during a training section"
grep -q "gpu_check tests: FAILED" "$S" || fail "no verdict line in summary.txt"
grep -qx "  tests: KILLED" "$S" || fail "no '  tests: KILLED' line among the verdicts"
grep -qx "  backend_ops test: skipped" "$S" || fail "the verdicts of the sections before the signal are lost"
[[ -f "$out/tests.tar.gz" ]] || fail "no tests.tar.gz"
tar -tzf "$out/tests.tar.gz" 2>/dev/null | grep -q "env.txt" || fail "tests.tar.gz lacks env.txt"
tar -tzf "$out/tests.tar.gz" 2>/dev/null | grep -q "olmoe-tiny/cpu.log" || fail "tests.tar.gz lacks the cut section's log"
n=$(find "$out" -type f | wc -l)
(( n == 2 )) || fail "$n files in OUT (summary.txt and tests.tar.gz expected)"
sleep 1
left=$(pgrep -f "$tmp" | grep -v "^$$\$" || true)
[[ -z "$left" ]] || fail "processes of the phase still run: $(ps -o pid=,args= -p $left | head -3)"
if (( fails )); then
    echo "---- summary.txt"
    cat "$S"
    exit 1
fi
echo "a phase ended by SIGTERM after ${took}s: summary.txt names the section cut and keeps every verdict; tests.tar.gz written"
