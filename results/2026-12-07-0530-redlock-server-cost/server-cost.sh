#!/usr/bin/env bash
# What one redis-server spends per request by pipelining depth: redis-benchmark (50 connections)
# sends N requests of `SET key token NX PX 5000` and of `EVALSHA <release.lua> 1 key token` at
# depth P on each connection; `perf stat -p` on the server gives its CPU and syscalls.
# usage: bash server-cost.sh [N]  -> server-cost.txt beside this script (or in $OUT).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
n=${1:-300000}
port=7331
start_server $port
sha=$(redis-cli -p $port script load "$(cat "$here/../../lua/release.lua")")
write_machine "$out/server-cost.machine.txt" "redis-benchmark -p $port -c 50 -n $n -r 100000 -P DEPTH SET/EVALSHA; perf stat -p server"
printf '%-8s %5s %10s %12s %12s %12s %12s\n' what depth req/s "cpu µs/req" "read/req" "write/req" "epoll/req" > "$out/server-cost.txt"
for what in set evalsha; do
  for depth in 1 2 4 8 16 32; do
    redis-cli -p $port flushall >/dev/null
    if [ $what = set ]; then
      cmd=(set "k:__rand_int__" tokentokentokentokentoken nx px 5000)
    else
      cmd=(evalsha "$sha" 1 "k:__rand_int__" tokentokentokentokentoken)
    fi
    perf stat -x, -e task-clock,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_wait \
      -p "$server" -o /tmp/h42-sc.perf & perf_pid=$!
    sleep 0.2
    rps=$(redis-benchmark -p $port -c 50 -n "$n" -r 100000 -P $depth -q "${cmd[@]}" | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
    kill -INT $perf_pid; wait $perf_pid || true
    awk -F, -v what=$what -v d=$depth -v n="$n" -v rps="$rps" '
      $3 ~ /task-clock/ {cpu=$1} $3 ~ /sys_enter_read/ {r=$1} $3 ~ /sys_enter_write/ {w=$1} $3 ~ /epoll_wait/ {e=$1}
      END {printf "%-8s %5d %10.0f %12.3f %12.3f %12.3f %12.3f\n", what, d, rps, cpu*1000/n, r/n, w/n, e/n}' /tmp/h42-sc.perf >> "$out/server-cost.txt"
  done
done
cat "$out/server-cost.txt"
