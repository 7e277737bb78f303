#!/usr/bin/env bash
# Redis 7.0.15's own test units against redis-server direct and through `lockkit proxy`, in the
# same run, against the same server (restarted before every unit, so units start clean).
#
#   bash results/2026-12-02-1630-redis-suite-proxy/run.sh [UNIT...]
#
# SUITE: the suite (default ../shared/redis-tests beside the clone, else /work/shared/redis-tests);
# LOCKKIT: the binary (default $CARGO_TARGET_DIR or target, debug); OUT: where the logs and
# summary.txt go (default this folder); PROXY_ARGS: extra `lockkit proxy` flags.
# Needs tclsh, redis-server, redis-cli. Prints ok/err per unit both ways, then the tests that
# pass direct and not through the proxy.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
SUITE="${SUITE:-$repo/../shared/redis-tests}"
[ -x "$SUITE/run-external.sh" ] || SUITE=/work/shared/redis-tests
LOCKKIT="${LOCKKIT:-${CARGO_TARGET_DIR:-$repo/target}/debug/lockkit}"
OUT="${OUT:-$here}"
units=("$@")
if [ ${#units[@]} -eq 0 ]; then
  # Every unit of the suite's own list but the cluster ones (no cluster here).
  units=(unit/printver unit/dump unit/auth unit/protocol unit/keyspace unit/scan unit/info
    unit/info-command unit/type/string unit/type/incr unit/type/list unit/type/list-2
    unit/type/list-3 unit/type/set unit/type/zset unit/type/hash unit/type/stream
    unit/type/stream-cgroups unit/sort unit/expire unit/other unit/multi unit/quit unit/aofrw
    unit/acl unit/acl-v2 unit/latency-monitor unit/pubsub unit/pubsubshard unit/slowlog
    unit/scripting unit/functions unit/maxmemory unit/introspection unit/introspection-2
    unit/limits unit/obuf-limits unit/bitops unit/bitfield unit/geo unit/memefficiency
    unit/hyperloglog unit/lazyfree unit/wait unit/pause unit/querybuf unit/pendingquerybuf
    unit/tls unit/tracking unit/oom-score-adj unit/shutdown unit/networking
    unit/client-eviction unit/violations unit/replybufsize)
fi
S=$((20000 + RANDOM % 20000)); P=$((S + 1))
work="$(mktemp -d)"
start_server="redis-server --port $S --save '' --appendonly no --daemonize yes --dir $work \
  --logfile $work/redis.log --pidfile $work/redis.pid --enable-debug-command yes \
  --enable-protected-configs yes --enable-module-command yes"
restart="redis-cli -p $S shutdown nosave >/dev/null 2>&1; for i in \$(seq 50); do redis-cli -p $S ping >/dev/null 2>&1 || break; sleep 0.1; done; $start_server; until redis-cli -p $S ping >/dev/null 2>&1; do sleep 0.1; done"
bash -c "$restart"
"$LOCKKIT" proxy --quiet --listen 127.0.0.1:$P --upstream redis://127.0.0.1:$S ${PROXY_ARGS:-} \
  > "$work/proxy.log" 2>&1 & proxy=$!
trap 'kill $proxy 2>/dev/null; redis-cli -p $S shutdown nosave >/dev/null 2>&1; rm -rf "$work"' EXIT
until redis-cli -p $P ping >/dev/null 2>&1; do
  kill -0 $proxy 2>/dev/null || { echo "lockkit proxy ($LOCKKIT) did not start:"; cat "$work/proxy.log"; exit 1; }
  sleep 0.1
done
mkdir -p "$OUT/direct" "$OUT/proxy"
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) cores, $(uname -sr), $(redis-server --version | cut -d' ' -f3)"
  echo "lockkit: $("$LOCKKIT" --version 2>/dev/null) $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)"
  echo "command: bash results/$(basename "$here")/run.sh ${units[*]}"
} > "$OUT/summary.txt"
echo "== direct (127.0.0.1:$S)" | tee -a "$OUT/summary.txt"
BEFORE_UNIT="$restart" "$SUITE/run-external.sh" $S "$OUT/direct" "${units[@]}" | tee -a "$OUT/summary.txt"
echo "== through lockkit proxy (127.0.0.1:$P -> $S)" | tee -a "$OUT/summary.txt"
BEFORE_UNIT="$restart" "$SUITE/run-external.sh" $P "$OUT/proxy" "${units[@]}" | tee -a "$OUT/summary.txt"
# Test names as the suite prints them: "[ok]: NAME (N ms)", "[err]: NAME in FILE".
names() { sed 's/\x1b\[[0-9;]*m//g' "$1" | grep "^\[$2\]" | sed -E 's/^\[[a-z]+\]: //; s/ \([0-9]+ ms\)$//; s/ in tests\/.*$//' | sort -u; }
echo "== passes direct, not through the proxy" | tee -a "$OUT/summary.txt"
for u in "${units[@]}"; do
  f="$(echo "$u" | tr / _).log"
  [ -f "$OUT/direct/$f" ] || continue
  comm -23 <(names "$OUT/direct/$f" ok) <(names "$OUT/proxy/$f" ok) | sed "s|^|$u: |" | tee -a "$OUT/summary.txt"
done
