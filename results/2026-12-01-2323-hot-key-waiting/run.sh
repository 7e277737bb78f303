#!/usr/bin/env bash
# One hot key, 50 clients, hold 5 ms, --retry: waiters polling vs woken by the release, same
# binary, same server, same run (twice each, interleaved).
# usage: bash run.sh LOCKKIT_BIN   (a release build of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
port=7401
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --logfile /dev/null & pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
args=(--url "redis://127.0.0.1:$port" --clients 50 --key-dist hot --hold 5ms --retry
  --retry-deadline 10s --duration 10s --warmup 1s)
{ echo "date: $(date -u +%FT%TZ)"; echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"; echo "command: lockkit bench ${args[*]} --wait poll|notify"; } > "$here/machine.txt"
run() { # label wait
  "$bin" bench "${args[@]}" --wait "$2" --json "$here/$1.json" > "$here/$1.txt" 2>&1 \
    || echo "$1 failed: see $1.txt"
  echo "$1: $(grep -m1 'cycles/s' "$here/$1.txt" || true)"
}
run poll-1 poll
run notify-1 notify
run poll-2 poll
run notify-2 notify
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
