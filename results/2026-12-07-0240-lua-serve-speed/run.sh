#!/usr/bin/env bash
# Usage: bash run.sh ROUNDS BIN...   (each BIN a lockkit binary; prints one line per server per round)
# Per round: a fresh redis-server (first in odd rounds, last in even ones) and a fresh
# `BIN lua serve` for each BIN (default flags: frozen
# clock, no password), each measured with redis-benchmark -c 50 -n $N: SET, GET (-t set,get) and
# EVALSHA of a one-line SET NX PX script on random keys. SERVE_FLAGS: extra `lua serve` flags
# (e.g. `--clock wall`); N: requests per test (200000).
set -euo pipefail
rounds=$1; shift
N=${N:-200000}
port=${PORT:-16742}
script="return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 30000)"
bench() { # name port
  local p=$2 sha out set get ev
  sha=$(redis-cli -p "$p" script load "$script")
  out=$(redis-benchmark -p "$p" -c 50 -n "$N" -r 100000 -t set,get -q 2>/dev/null | tr '\r' '\n' | grep 'requests per second')
  set=$(echo "$out" | awk -F': ' '/^SET/ {print $2}' | awk '{print $1}')
  get=$(echo "$out" | awk -F': ' '/^GET/ {print $2}' | awk '{print $1}')
  ev=$(redis-benchmark -p "$p" -c 50 -n "$N" -r 100000 -q evalsha "$sha" 1 'key:__rand_int__' tok 2>/dev/null | tr '\r' '\n' | grep 'requests per second' | awk -F': ' '{print $2}' | awk '{print $1}')
  echo "$1 set=$set get=$get evalsha=$ev"
}
redis() {
  redis-server --port $port --save "" --appendonly no --daemonize yes >/dev/null
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
  bench redis-server $port
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  sleep 0.3
}
for r in $(seq 1 "$rounds"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  # Odd rounds start with redis-server, even rounds end with it (the load drifts).
  if [ $((r % 2)) -eq 1 ]; then redis; fi
  for bin in "$@"; do
    # shellcheck disable=SC2086
    "$bin" lua serve --port $port ${SERVE_FLAGS:-} >/dev/null 2>&1 &
    pid=$!
    until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
    bench "$(basename "$bin")" $port
    kill "$pid"; wait "$pid" 2>/dev/null || true
    sleep 0.3
  done
  if [ $((r % 2)) -eq 0 ]; then redis; fi
done
