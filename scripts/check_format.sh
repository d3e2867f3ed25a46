#!/usr/bin/env bash
# The layout rules on every tracked C++/CUDA file (.clang-format: the formatter's dry run must find
# nothing to change, includes sorted) and the .editorconfig rules on every tracked text file (no
# trailing whitespace outside Markdown, a final newline, no tabs in sources), plus files not yet
# added that git does not ignore. Run by CI (.ci/run).
#   bash scripts/check_format.sh           check
#   bash scripts/check_format.sh --fix     reformat the C++/CUDA files in place
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
mapfile -t all < <(git ls-files --cached --others --exclude-standard | sort -u)
fail=0
texts=()
sources=()
for f in "${all[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    tests/fixtures/*|fuzz/corpus/*|fuzz/regressions/*|*.json|*.bin|*.model|*.png|*.safetensors|*.gz) continue ;;
  esac
  texts+=("$f")
  case "$f" in *.h|*.cpp|*.cu|*.cuh) sources+=("$f") ;; esac
done
if [ "${1:-}" = --fix ]; then
  clang-format -i "${sources[@]}"
  exit 0
fi
# Trailing whitespace (Markdown may end a line with two spaces), tabs in sources: one grep each.
while IFS= read -r f; do
  [ "${f##*.}" = md ] && continue
  echo "$f: trailing whitespace (.editorconfig) on line(s) $(grep -n -E '[[:space:]]+$' "$f" | cut -d: -f1 | head -5 | paste -sd, -)"
  fail=1
done < <(grep -l -E '[[:space:]]+$' "${texts[@]}" || true)
while IFS= read -r f; do
  echo "$f: a tab (.editorconfig: spaces)"; fail=1
done < <(grep -l -P '\t' "${sources[@]}" || true)
for f in "${texts[@]}"; do
  if [ -s "$f" ] && [ "$(tail -c1 "$f" | od -An -c | tr -d ' ')" != '\n' ]; then
    echo "$f: no newline at the end (.editorconfig)"; fail=1
  fi
done
# The formatter over every source in one call; each file it would change is named once.
while IFS= read -r f; do
  echo "$f: not as .clang-format lays it out (bash scripts/check_format.sh --fix)"; fail=1
done < <(clang-format --dry-run --Werror "${sources[@]}" 2>&1 | sed -n -E 's/^([^:]+):[0-9]+:[0-9]+: error: .*clang-format-violations.*/\1/p' | sort -u)
[ "$fail" = 0 ] && echo "check_format: ${#texts[@]} files (${#sources[@]} C++/CUDA): layout and whitespace as the rules say"
exit "$fail"
