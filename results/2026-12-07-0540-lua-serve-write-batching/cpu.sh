#!/usr/bin/env bash
# Usage: bash cpu.sh ROUNDS BIN...   (C: clients, 50)   CPU time the server spends per request (perf stat's
# task-clock over all its threads, and its context switches), for redis-server and
# `BIN lua serve`, on the same redis-benchmark loads as run.sh (SET, GET, EVALSHA; -c $C, N each).
# Microseconds of server CPU per request do not depend on how fast the client went, so they
# compare better than requests per second on a loaded machine.
set -euo pipefail
rounds=$1; shift
N=${N:-100000}
C=${C:-50}
port=${PORT:-16743}
script="return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 30000)"
measure() { # name pid test...
  local name=$1 pid=$2 t stat
  shift 2
  for t in set get evalsha; do
    stat=$(mktemp)
    perf stat -e task-clock,context-switches -p "$pid" -x, -o "$stat" &
    local sp=$!
    sleep 0.2
    if [ $t = evalsha ]; then
      redis-benchmark -p $port -c "$C" -n "$N" -r 100000 -q evalsha "$sha" 1 'key:__rand_int__' tok >/dev/null 2>&1
    else
      redis-benchmark -p $port -c "$C" -n "$N" -r 100000 -t $t -q >/dev/null 2>&1
    fi
    kill -INT $sp; wait $sp || true
    awk -F, -v n="$N" -v who="$name" -v t="$t" '
      $3 == "task-clock" {ms = $1} $3 == "context-switches" {cs = $1}
      END {printf "%s %s cpu_us_per_request=%.2f switches_per_request=%.2f\n", who, t, ms * 1000 / n, cs / n}' "$stat"
    rm -f "$stat"
  done
}
for r in $(seq 1 "$rounds"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  redis-server --port $port --save "" --appendonly no --daemonize no --logfile /dev/null & pid=$!
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
  sha=$(redis-cli -p $port script load "$script")
  measure redis-server $pid
  kill $pid; wait $pid 2>/dev/null || true
  for bin in "$@"; do
    "$bin" lua serve --port $port >/dev/null 2>&1 & pid=$!
    until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
    sha=$(redis-cli -p $port script load "$script")
    measure "$(basename "$bin")" $pid
    kill $pid; wait $pid 2>/dev/null || true
  done
done
