#!/usr/bin/env bash
# Redis 7.0.15's unit/scripting and unit/functions against `lockkit lua serve` and against
# redis-server, run the same way in the same run (a fresh server of each per unit).
#   run.sh [LOCKKIT_BINARY] [OUTDIR] [UNIT...]
# Needs tclsh, redis-server and ../shared/redis-tests beside the checkout (REDIS_TESTS=DIR to
# point elsewhere). Prints one line per unit and server, and the totals.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-$repo/target/debug/lockkit}"
out="${2:-$(mktemp -d)}"
shift 2 2>/dev/null || shift $#
units=("$@")
[ ${#units[@]} -eq 0 ] && units=(unit/scripting unit/functions)
tests="${REDIS_TESTS:-$repo/../shared/redis-tests}"
# --durable: an exception fails its test instead of ending the unit, on both servers alike.
# The documented exceptions (docs/HARNESS.md, "Redis's own test suite") are skipped on both:
#   Script return recursive object   the harness refuses replies nested deeper than 200
#                                    levels; Redis answers 7,995 levels and then an error (and
#                                    the test, failing, leaves its client in raw mode, which
#                                    fails every later test)
#   Script ACL check                 ACL SETUSER / AUTH as another user are not emulated
#   needs:config-maxmemory (tag)     CONFIG SET maxmemory is not emulated (the harness's
#                                    keyspace limit is set at start, --maxmemory)
#   ... protocol parsing (37 a pass)  DEBUG PROTOCOL (RESP3 sets, booleans, big numbers,
#                                    verbatim strings, attributes) is not emulated; the block's
#                                    first failure ends it before it turns
#                                    DEBUG SET-DISABLE-DENY-SCRIPTS off again
#   Scripts can't run XREAD and      consumer groups (XGROUP CREATE, XREADGROUP) and XREAD are
#     XREADGROUP with BLOCK option   not emulated
#   EVAL does not leak in the Lua    used_memory_lua must stay under 100 KB: the harness's Lua
#     stack                          heap starts at about 108 KB (and stays flat)
#   Script delete the expired key    DEBUG OBJECT (an address, the RDB length, the LRU clock:
#                                    server internals the harness does not have)
#   not enough good replicas         replication (min-replicas-to-write) is not emulated
#   reject script do not cause a     CONFIG SET maxmemory (as the tag below)
#     Lua stack leak
#   Consistent eval error reporting  CONFIG SET maxmemory, INFO commandstats (calls, rejected
#                                    and failed calls of commands inside scripts), errors a
#                                    script catches with redis.pcall
# NO_EXCEPTIONS=1 runs everything.
EXCEPTIONS="--skiptest /Script.return.recursive.object --skiptest /Script.ACL.check --skiptest /protocol.parsing --tags -needs:config-maxmemory"
EXCEPTIONS+=" --skiptest /Scripts.can.t.run.XREAD.and.XREADGROUP.with.BLOCK --skiptest /EVAL.does.not.leak.in.the.Lua.stack"
EXCEPTIONS+=" --skiptest /^Script.delete.the.expired.key$ --skiptest /^not.enough.good.replicas$"
EXCEPTIONS+=" --skiptest /^reject.script.do.not.cause.a.Lua.stack.leak$ --skiptest /^Consistent.eval.error.reporting$"
[ -n "${NO_EXCEPTIONS:-}" ] && EXCEPTIONS=""
export SUITE_ARGS="--singledb --durable $EXCEPTIONS ${EXTRA_SUITE_ARGS:-}"
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
  "$tests/run-external.sh" "$port" "$out/$kind" "$unit" | grep -v '^TOTAL' | sed "s/^/$kind /"
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
}

for unit in "${units[@]}"; do
  run_unit redis "$unit"
  run_unit lockkit "$unit"
done | tee "$out/summary.txt"
awk '{ok[$1]+=$4; err[$1]+=$6} END {for (k in ok) printf "TOTAL %s ok %d err %d\n", k, ok[k], err[k]}' "$out/summary.txt" | sort | tee -a "$out/summary.txt"
