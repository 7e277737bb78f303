#!/usr/bin/env bash
# Uncontended cycles (50 clients, 100k keys, hold 0): the tool's CPU per cycle against the
# server's, BEFORE (each lock on the connection its token hashes to, bench default 4) and AFTER
# (each task keeps to one connection and its locks' tokens land on it, bench default 2, fewer
# clock reads, no boxed future per command), each at its default and both at 4 connections;
# same server, interleaved, ROUNDS rounds (default 3).
# With perf installed, also the sendto/recvfrom/epoll_wait system calls per cycle.
# usage: bash run.sh BEFORE_BIN AFTER_BIN [OUT_DIR]   (release builds of `lockkit`; OUT_DIR
# defaults to this folder)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
before=$1 after=$2
if [ -n "${3:-}" ]; then mkdir -p "$3"; here=$(cd "$3" && pwd); fi
port=7404
source "$(dirname "$0")/../lib.sh"
start_server "$port"
pid=$server
args=(--url "redis://127.0.0.1:$port" --clients 50 --keys 100k --hold 0 --ttl 5s
  --duration 6s --warmup 1s)
write_machine "$here/machine.txt" "lockkit bench ${args[*]} [--connections 4]"
echo "round,build,connections,cycles_per_s,lockkit_us,server_us,ratio,sendto_per_cycle,recvfrom_per_cycle,epoll_wait_per_cycle" > "$here/raw.csv"
one() { # label bin connections(default|N) round
  local out="$here/$1-c$3-$4.txt" conn=() calls=",,"
  [ "$3" = default ] || conn=(--connections "$3")
  "$2" bench "${args[@]}" "${conn[@]}" --json "${out%.txt}.json" > "$out" 2>&1 &
  local bench=$!
  if command -v perf >/dev/null; then
    sleep 2 # past the warm-up: 4 s of the measured 6
    perf stat -x, -e syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait \
      -p "$bench" -- sleep 4 2> "$here/perf-$1-c$3-$4.csv" || true
  fi
  wait "$bench" || echo "$1 c=$3 failed: see $out"
  local cps tool srv
  cps=$(grep -m1 'cycles/s' "$out" | awk '{gsub(",","",$2); print $2}')
  tool=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us,?","",$5); print $5}')
  srv=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us","",$7); print $7}')
  if [ -s "$here/perf-$1-c$3-$4.csv" ]; then
    calls=$(awk -F, -v c="$cps" '/sys_enter/ {printf "%s%.3f", (n++ ? "," : ""), $1 / (c * 4)}' "$here/perf-$1-c$3-$4.csv")
  fi
  echo "$4,$1,$3,$cps,$tool,$srv,$(awk -v a="$tool" -v b="$srv" 'BEGIN{printf "%.2f", a/b}'),$calls" >> "$here/raw.csv"
  echo "$1 c=$3 round $4: $cps cycles/s, lockkit $tool us, server $srv us, syscalls/cycle $calls"
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  one before "$before" default "$r"
  one after "$after" default "$r"
  one before "$before" 4 "$r"
  one after "$after" 4 "$r"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
rm -f "$here"/*.hlog "$here"/*.html
