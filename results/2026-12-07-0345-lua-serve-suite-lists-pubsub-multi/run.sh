#!/usr/bin/env bash
# Redis 7.0.15's unit/type/list, unit/pubsub, unit/pubsubshard and unit/multi against
# `lockkit lua serve` and against redis-server, run the same way in the same run (a fresh server
# of each per unit), with nothing skipped: `--singledb` only, so an exception (a command the
# server refuses where the suite expects an answer) ends the unit, on both servers alike. DURABLE=1 adds `--durable`
# (an exception fails its test and the unit goes on).
#   run.sh [LOCKKIT_BINARY] [OUTDIR] [UNIT...]
# Needs tclsh, redis-server and Redis's suite in ../shared/redis-tests beside the checkout
# (REDIS_TESTS=DIR to point elsewhere). Prints one line per unit and server (with the seconds
# it took), and the totals. A copy of ../2026-12-06-2250-lua-serve-suite-nothing-skipped/run.sh
# with other units and the seconds added.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-$repo/target/debug/lockkit}"
out="${2:-$(mktemp -d)}"
shift 2 2>/dev/null || shift $#
units=("$@")
[ ${#units[@]} -eq 0 ] && units=(unit/type/list unit/pubsub unit/pubsubshard unit/multi)
tests="${REDIS_TESTS:-$repo/../shared/redis-tests}"
export SUITE_ARGS="--singledb ${DURABLE:+--durable} ${EXTRA_SUITE_ARGS:-}"
mkdir -p "$out"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_unit() { # kind unit
  local kind="$1" unit="$2" port pid
  if [ "$kind" = redis ]; then
    port="$(free_port)"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
      --enable-debug-command yes --dir "$out" --logfile "$out/redis-server.log" & pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  else
    # --clock wall: the suite waits for real time to pass (`after 2` for a key to expire).
    # exec: the coprocess is lockkit itself, so killing its pid stops the server.
    coproc SERVE { exec "$bin" lua serve --port 0 --clock wall 2>>"$out/lockkit-serve.log"; }
    pid=$SERVE_PID
    read -r -t 20 port <&"${SERVE[0]}"
  fi
  local start=$SECONDS line
  line="$("$tests/run-external.sh" "$port" "$out/$kind" "$unit" | grep -v '^TOTAL')"
  echo "$kind $line  secs $((SECONDS - start))"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

for unit in "${units[@]}"; do
  run_unit redis "$unit"
  run_unit lockkit "$unit"
done | tee "$out/summary.txt"
awk '{ok[$1]+=$4; err[$1]+=$6} END {for (k in ok) printf "TOTAL %s ok %d err %d\n", k, ok[k], err[k]}' "$out/summary.txt" | sort | tee -a "$out/summary.txt"
