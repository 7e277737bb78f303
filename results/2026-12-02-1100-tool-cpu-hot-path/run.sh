#!/usr/bin/env bash
# Uncontended cycles (50 clients, 100k keys, hold 0): the tool's CPU per cycle against the
# server's, BEFORE and AFTER, each at its defaults, same server, interleaved, ROUNDS rounds
# (default 5). Besides what `lockkit bench` reports, the user and system CPU of the tool and of
# the server over 3 s of each measured run, from /proc (clock ticks of 10 ms).
# usage: ROUNDS=5 bash run.sh BEFORE_BIN AFTER_BIN [OUT_DIR]   (release builds of `lockkit`;
# OUT_DIR defaults to this folder)
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
before=$1 after=$2 here=$(out_dir "$(dirname "$0")" "${3:-}")
port=7405
start_server "$port"
args=(--url "redis://127.0.0.1:$port" --clients 50 --keys 100k --hold 0 --ttl 5s
  --duration 6s --warmup 1s)
write_machine "$here/machine.txt" "lockkit bench ${args[*]}"
echo "round,build,cycles_per_s,lockkit_us,server_us,ratio,lockkit_user_us,lockkit_sys_us,server_user_us,server_sys_us" > "$here/raw.csv"
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; }
one() { # label bin round
  local out="$here/$1-$3.txt"
  "$2" bench "${args[@]}" --json "${out%.txt}.json" > "$out" 2>&1 &
  local bench=$! t0 s0 t1 s1
  sleep 2 # past the warm-up: 3 s of the measured 6
  t0=$(ticks "$bench"); s0=$(ticks "$server")
  sleep 3
  t1=$(ticks "$bench"); s1=$(ticks "$server")
  wait "$bench" || echo "$1 round $3 failed: see $out"
  local cps tool srv split
  cps=$(grep -m1 'cycles/s' "$out" | awk '{gsub(",","",$2); print $2}')
  tool=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us,?","",$5); print $5}')
  srv=$(grep -m1 'CPU per cycle' "$out" | awk '{gsub("us","",$7); print $7}')
  # Ticks over 3 s at the run's own rate (the 6 s average): microseconds per cycle.
  split=$(awk -v a="$t0 $s0" -v b="$t1 $s1" -v c="$cps" 'BEGIN {
    split(a, x, " "); split(b, y, " "); n = c * 3
    printf "%.2f,%.2f,%.2f,%.2f", (y[1]-x[1])*1e4/n, (y[2]-x[2])*1e4/n, (y[3]-x[3])*1e4/n, (y[4]-x[4])*1e4/n }')
  echo "$3,$1,$cps,$tool,$srv,$(awk -v a="$tool" -v b="$srv" 'BEGIN{printf "%.3f", a/b}'),$split" >> "$here/raw.csv"
  echo "$1 round $3: $cps cycles/s, lockkit $tool us, server $srv us (user,sys: $split)"
}
for r in $(seq 1 "${ROUNDS:-5}"); do
  one before "$before" "$r"
  one after "$after" "$r"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
rm -f "$here"/*.hlog "$here"/*.html
