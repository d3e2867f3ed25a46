#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of untrusted files (fuzz/): build the libFuzzer targets with
# clang, ASan and UBSan into build-fuzz/, then run each for FUZZ_SECONDS (default 15; 8 targets, under
# 5 minutes in all) from its committed seeds (fuzz/corpus/<target>) and regression inputs
# (fuzz/regressions/<target>). Fails on any crash, leak, timeout or sanitizer report; the input is left
# in build-fuzz/artifacts/. Prints executions per target. Usage: scripts/fuzz.sh [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-15}"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config safetensors trainer_state manifest shard jsonl tokenizer tokenizer_json)

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSKEW_CUDA=OFF -DSKEW_FUZZ=ON -DSKEW_BUILD_TESTS=OFF \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")

mkdir -p build-fuzz/artifacts build-fuzz/logs
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=()
printf '%-15s %12s %10s %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  work="build-fuzz/corpus/$t"   # new inputs go here, not into the committed seeds
  mkdir -p "$work" "fuzz/regressions/$t"
  log="build-fuzz/logs/$t.log"
  rc=0
  OMP_NUM_THREADS=1 "build-fuzz/fuzz/fuzz_$t" "$work" "fuzz/corpus/$t" "fuzz/regressions/$t" \
      -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2560 -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="build-fuzz/artifacts/$t-" >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  if [ "$rc" -ne 0 ] || grep -q -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    printf '%-15s %12s %10s %s\n' "$t" "$execs" "$rate" "FAILED (rc $rc, see $log)"
    grep -E 'ERROR:|runtime error:|SUMMARY:|Test unit written' "$log" | head -5 || true
    failed+=("$t")
  else
    printf '%-15s %12s %10s %s\n' "$t" "$execs" "$rate" ok
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}: copy each build-fuzz/artifacts/<target>-* input into fuzz/regressions/<target>/ once fixed"
  exit 1
fi
echo "fuzz: no crash, leak or sanitizer report in ${#targets[@]} targets (${seconds}s each)"
