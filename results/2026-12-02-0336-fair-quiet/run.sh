#!/usr/bin/env bash
# One hot key, hold 5 ms, --retry: waiters woken by the release (notify) vs taking turns through
# the fair queue in Redis (fair), same binary, same server, same run, interleaved.
#  A. one process, 50 clients (the workload of results/2026-12-01-2323-hot-key-waiting), twice each;
#  B. two processes at once, 25 clients each, on the same key: where notify mode is not FIFO.
# usage: bash run.sh LOCKKIT_BIN   (a release build of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
port=7402
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --logfile /dev/null & pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
args=(--url "redis://127.0.0.1:$port" --key-dist hot --hold 5ms --retry
  --retry-deadline 10s --duration 10s --warmup 1s)
{ echo "date: $(date -u +%FT%TZ)"; echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"
  echo "A: lockkit bench ${args[*]} --clients 50 --wait notify|fair"
  echo "B: two at once: lockkit bench ${args[*]} --clients 25 --wait notify|fair"; } > "$here/machine.txt"
one() { # label wait clients
  "$bin" bench "${args[@]}" --clients "$3" --wait "$2" --json "$here/$1.json" > "$here/$1.txt" 2>&1 \
    || echo "$1 failed: see $1.txt"
}
run() { # label wait
  one "$1" "$2" 50
  echo "$1: $(grep -m1 'cycles/s' "$here/$1.txt" || true)"
}
two() { # label wait
  one "$1-a" "$2" 25 & a=$!
  one "$1-b" "$2" 25 & b=$!
  wait $a $b
  echo "$1: $(grep -m1 'cycles/s' "$here/$1-a.txt" || true) | $(grep -m1 'cycles/s' "$here/$1-b.txt" || true)"
}
run notify-1 notify
run fair-1 fair
run notify-2 notify
run fair-2 fair
two notify-2p-1 notify
two fair-2p-1 fair
two notify-2p-2 notify
two fair-2p-2 fair
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
