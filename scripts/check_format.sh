#!/usr/bin/env bash
# The layout rules on every C++/CUDA file changed since the rules were added (.clang-format: the
# formatter's dry run must find nothing to change, includes sorted) and the .editorconfig rules on
# every changed text file (no trailing whitespace outside Markdown, a final newline, no tabs in
# sources). Run by CI (.ci/run). A file that is not changed is left as it is.
#   bash scripts/check_format.sh           check
#   bash scripts/check_format.sh --fix     reformat the changed C++/CUDA files in place
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
base=$(git log --diff-filter=A --format=%H -- .clang-format | tail -1)
if [ -z "$base" ] || ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  echo "check_format: the commit that added .clang-format is not in this checkout's history; nothing to compare"
  exit 0
fi
mapfile -t changed < <( (git diff --name-only --diff-filter=d "$base" HEAD; git diff --name-only --diff-filter=d) | sort -u)
fail=0
sources=()
for f in "${changed[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    tests/fixtures/*|fuzz/corpus/*|fuzz/regressions/*|*.json|*.bin|*.model|*.png|*.safetensors) continue ;;
  esac
  case "$f" in *.h|*.cpp|*.cu|*.cuh) sources+=("$f") ;; esac
  if [ "${f##*.}" != md ] && grep -n -E '[[:space:]]+$' "$f" >/dev/null; then
    echo "$f: trailing whitespace (.editorconfig) on line(s) $(grep -n -E '[[:space:]]+$' "$f" | cut -d: -f1 | head -5 | paste -sd, -)"
    fail=1
  fi
  if [ -s "$f" ] && [ "$(tail -c1 "$f" | od -An -c | tr -d ' ')" != '\n' ]; then
    echo "$f: no newline at the end (.editorconfig)"; fail=1
  fi
done
for f in "${sources[@]}"; do
  if grep -n -P '\t' "$f" >/dev/null; then echo "$f: a tab (.editorconfig: spaces)"; fail=1; fi
  if [ "${1:-}" = --fix ]; then clang-format -i "$f"; continue; fi
  if ! clang-format --dry-run --Werror "$f" 2>/dev/null; then
    echo "$f: not as .clang-format lays it out (bash scripts/check_format.sh --fix)"
    fail=1
  fi
done
[ "${1:-}" = --fix ] && exit 0
[ "$fail" = 0 ] && echo "check_format: ${#changed[@]} changed files since $(git rev-parse --short "$base"): layout and whitespace as the rules say"
exit "$fail"
