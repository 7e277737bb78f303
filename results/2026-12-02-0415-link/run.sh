#!/usr/bin/env bash
# Uncontended cycles (50 clients, 100k keys, hold 0): the tool's CPU per cycle against the
# server's, before (redis-rs ConnectionManager) and after (lockkit's own pipelined connection),
# over 1 and 4 connections, same server, same run, interleaved, three rounds.
# usage: bash run.sh BEFORE_BIN AFTER_BIN   (release builds of `lockkit`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
port=7403
source "$(dirname "$0")/../lib.sh"
start_server "$port"
pid=$server
args=(--url "redis://127.0.0.1:$port" --clients 50 --keys 100k --hold 0 --ttl 5s
  --duration 8s --warmup 1s)
write_machine "$here/machine.txt" "lockkit bench ${args[*]} --connections 1|4"
echo "run,build,connections,cycles_per_s,lockkit_us,server_us,ratio" > "$here/raw.csv"
one() { # label bin connections round
  local out="$here/$1-c$3-$4.txt"
  "$2" bench "${args[@]}" --connections "$3" --json "${out%.txt}.json" > "$out" 2>&1 \
    || echo "$1 c=$3 failed: see $out"
  local cps tool srv
  cps=$(grep -m1 'cycles/s' "$out" | awk '{gsub(",","",$2); print $2}')
  tool=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us,?","",$5); print $5}')
  srv=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us","",$7); print $7}')
  echo "$4,$1,$3,$cps,$tool,$srv,$(awk -v a="$tool" -v b="$srv" 'BEGIN{printf "%.2f", a/b}')" >> "$here/raw.csv"
  echo "$1 c=$3 round $4: $cps cycles/s, lockkit $tool us, server $srv us"
}
for r in 1 2 3; do
  for c in 1 4; do
    one before "$before" "$c" "$r"
    one after "$after" "$c" "$r"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
rm -f "$here"/*.hlog "$here"/*.html
