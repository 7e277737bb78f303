#!/usr/bin/env bash
# Uncontended cycles (50 clients, 100k keys, hold 0): the tool's CPU per cycle against the
# server's, before and after the change, same server, same run, interleaved, three times each.
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
port=7402
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --logfile /dev/null & pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
args=(--url "redis://127.0.0.1:$port" --clients 50 --keys 100k --hold 0 --ttl 5s
  --duration 10s --warmup 1s)
{ echo "date: $(date -u +%FT%TZ)"; echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"; echo "command: lockkit bench ${args[*]}"; } > "$here/machine.txt"
run() { # label bin
  "$2" bench "${args[@]}" --json "$here/$1.json" > "$here/$1.txt" 2>&1 \
    || echo "$1 failed: see $1.txt"
  echo "$1: $(grep -m1 'cycles/s' "$here/$1.txt" | awk '{print $1, $2}') $(grep -m1 'CPU per cycle' "$here/$1.txt" || true)"
}
for i in 1 2 3; do
  run "before-$i" "$before"
  run "after-$i" "$after"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
