#!/usr/bin/env bash
# Redlock over 3 nodes (50 clients, 100k keys, no hold, TTL 5 s), two lockkit builds interleaved
# with rslock 0.10.0 and node-redlock 4.2.0 on the same nodes, ROUNDS rounds, every process's CPU
# counted by `perf stat` (the script of ../2026-12-07-0530-redlock-server-cost/, which says what
# RSLOCK and NODE_PEER must point at).
# Three lockkit runs per round: BEFORE, AFTER, and AFTER with `--script-mode fcall` (the
# scripts as the `lockkit` Function library, Redis 7+, instead of EVALSHA).
# usage: bash run.sh BEFORE_BIN AFTER_BIN [ROUNDS]   (release builds; ROUNDS default 5)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$(realpath "$1") after=$(realpath "$2") rounds=${3:-5}
for b in "$before" "$after"; do
  [ -x "$b" ] || { echo "$b: a lockkit release binary (cargo build --release -p lockkit-cli)" >&2; exit 2; }
done
source "$here/../lib.sh"
write_machine "$here/machine.txt" "bash run.sh $1 $2 $rounds (RSLOCK=$RSLOCK NODE_PEER=${NODE_PEER:-})"
OUT="$here/runs" bash "$here/../2026-12-07-0530-redlock-server-cost/run.sh" "$rounds" \
  before="$before" after="$after" after-fcall="$after:--script-mode fcall"
python3 "$here/../2026-12-07-0530-redlock-server-cost/summarize.py" "$here/runs" > "$here/summary.md.tmp"
mv "$here/summary.md.tmp" "$here/summary.md"
cat "$here/summary.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
