#!/usr/bin/env bash
# Redlock over 3 local redis-servers, 50 clients: healthy vs one node frozen with SIGSTOP,
# for two lockkit builds side by side in the same run (before/after "answers at quorum").
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
# OUT=DIR writes the results there instead of beside this script. MIDRUN=1 adds a run per build
# where node 3 is running at the start and frozen about 2 s into the measured time (`*-midrun`: its
# per-second timeline shows both halves). PERF=stat runs each bench under `perf stat` and keeps
# its counts of system calls (connect, sendto) and CPU time in `*.perf-stat.txt`.
set -euo pipefail
here=${OUT:-$(cd "$(dirname "$0")" && pwd)}
mkdir -p "$here"
before=$1 after=$2
ports=(7301 7302 7303)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
for p in "${ports[@]}"; do
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --logfile /dev/null & pids+=($!)
done
# The delayed-restart rule keeps a node out for a TTL (5 s here) after it starts.
sleep 6
urls=(--url redis://127.0.0.1:7301 --url redis://127.0.0.1:7302 --url redis://127.0.0.1:7303)
run() { # label bin
  local wrap=()
  [ "${PERF:-}" = stat ] && wrap=(perf stat -e syscalls:sys_enter_connect,syscalls:sys_enter_sendto,task-clock
    -o "$here/$1.perf-stat.txt" --)
  "${wrap[@]}" "$2" bench "${urls[@]}" --clients 50 --keys 100k --duration 5s --warmup 1s \
    --json "$here/$1.json" > "$here/$1.txt" 2>&1 || echo "$1 failed: see $1.txt"
  echo "$1: $(grep -m1 -i 'cycles/s' "$here/$1.txt" || true)"
}
{ echo "date: $(date -u +%FT%TZ)"; echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"; echo "command: ${urls[*]} --clients 50 --keys 100k --duration 5s --warmup 1s"; } > "$here/machine.txt"
run before-healthy "$before"
run after-healthy "$after"
kill -STOP "${pids[2]}"
run before-frozen "$before"
run after-frozen "$after"
kill -CONT "${pids[2]}"
if [ "${MIDRUN:-0}" = 1 ]; then
  for label in before after; do
    bin=$before; [ "$label" = after ] && bin=$after
    sleep 1 # node 3 works off what the last run left in its socket buffers
    # Start-up and warm-up take about 1.5 s: node 3 stops about 2 s into the measured 5 s.
    ( sleep 3.5; kill -STOP "${pids[2]}" ) & stopper=$!
    run "$label-midrun" "$bin"
    wait "$stopper" || true
    kill -CONT "${pids[2]}"
  done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
