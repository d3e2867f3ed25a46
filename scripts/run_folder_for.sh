#!/usr/bin/env bash
# Which run folder scripts/quickstart.sh trains into: BASE if it is free or holds a run of this very
# config (its config.yaml equals what `skew config CONFIG` resolves today, so a rerun resumes it),
# else the first BASE-2, BASE-3, ... that is; a folder made by another config or another skew version
# is never resumed, and a message on stderr says why and what to do with it.
# Usage: scripts/run_folder_for.sh SKEW CONFIG BASE   (prints the folder on stdout)
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 SKEW CONFIG BASE" >&2
  exit 2
fi
skew=$1 config=$2 base=$3
resolved=$("$skew" config "$config")  # fails (naming the problem) on a bad config
for n in "" $(seq 2 99); do
  dir=$base${n:+-$n}
  if [ ! -e "$dir" ]; then
    echo "$dir"
    exit 0
  fi
  if [ -f "$dir/config.yaml" ] && [ "$(cat "$dir/config.yaml")" == "$resolved" ]; then
    echo "$dir"
    exit 0
  fi
  if [ -f "$dir/config.yaml" ]; then why="its config.yaml differs from $config as this skew resolves it (another config or skew version)"
  else why="it holds no config.yaml (not a skew run folder)"; fi
  echo "quickstart: not resuming $dir: $why; compare with: $skew config $config | diff - $dir/config.yaml (remove the folder to reuse its name)" >&2
done
echo "quickstart: $base and $base-2 to $base-99 are all taken by other runs; remove some" >&2
exit 1
