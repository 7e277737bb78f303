#!/usr/bin/env bash
# Redlock over 3 local redis-servers, 50 clients: healthy vs one node frozen with SIGSTOP,
# for two lockkit builds side by side in the same run (before/after "answers at quorum").
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
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
  "$2" bench "${urls[@]}" --clients 50 --keys 100k --duration 5s --warmup 1s \
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
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
