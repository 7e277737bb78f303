#!/usr/bin/env bash
# Uncontended cycles (50 clients, 100k keys, hold 0): the tool's CPU per cycle against the
# server's, before and after the change, same server, same run, interleaved, three times each.
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
port=7402
source "$(dirname "$0")/../lib.sh"
start_server "$port"
pid=$server
args=(--url "redis://127.0.0.1:$port" --clients 50 --keys 100k --hold 0 --ttl 5s
  --duration 10s --warmup 1s)
write_machine "$here/machine.txt" "lockkit bench ${args[*]}"
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
