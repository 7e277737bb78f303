#!/usr/bin/env bash
# Redlock over 3 local redis-servers, 50 clients, two lockkit builds side by side: three rounds of
# ../2026-12-02-0500-redlock-frozen-link/run.sh with MIDRUN=1 (healthy, node 3 frozen from the
# start, node 3 frozen mid-run) into run1/-run3/, then a fourth under perf stat into perf-stat/.
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../2026-12-02-0500-redlock-frozen-link/run.sh
for r in 1 2 3; do
  OUT=$here/run$r MIDRUN=1 bash "$script" "$1" "$2"
done
OUT=$here/perf-stat MIDRUN=1 PERF=stat bash "$script" "$1" "$2"
