#!/usr/bin/env bash
# Redis 7.0.15's own test units with `--cluster-mode`, unit by unit: directly against a fresh
# one-node cluster that owns all 16384 slots, then through `lockkit proxy` in front of a fresh
# 3-master cluster (a fresh cluster per unit and side: the units leave keys, scripts, configs).
# The tests of skip-list.txt (tests that assume one node, each with its reason) are skipped on
# both sides. `--durable`: a test that meets an unexpected error fails and the unit goes on (by
# default the suite stops the unit there), so every test of a unit is counted.
#
#   bash results/2026-12-07-0225-proxy-cluster-redis-suite/run.sh [UNIT...]
#
# Default units: the nine of issue 38. Writes OUT/direct/ and OUT/proxy/ (each unit's log),
# OUT/table.md (the table per unit) and OUT/summary.txt (date, machine, command, the table,
# the failing tests of both sides, the tests that pass direct and not through the proxy).
# LOCKKIT: the binary (default $CARGO_TARGET_DIR or target, release; copied before use, so a
# rebuild during the run does not change it); SUITE: the suite (default ../shared/redis-tests
# beside the clone, else /work/shared/redis-tests); OUT: default this folder; SKIP: the skip
# list (default skip-list.txt here); PROXY_ARGS: extra `lockkit proxy` flags.
# Needs tclsh, redis-server, redis-cli.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
SUITE="${SUITE:-$repo/../shared/redis-tests}"
[ -x "$SUITE/run-external.sh" ] || SUITE=/work/shared/redis-tests
LOCKKIT="${LOCKKIT:-${CARGO_TARGET_DIR:-$repo/target}/release/lockkit}"
OUT="${OUT:-$here}"
SKIP="${SKIP:-$here/skip-list.txt}"
units=("$@")
[ ${#units[@]} -eq 0 ] && units=(unit/type/string unit/type/incr unit/type/hash unit/type/list
  unit/type/set unit/expire unit/keyspace unit/scripting unit/multi)

work="$(mktemp -d)"
pids=()
# Stops what this script started, by pid (SIGKILL after 2 s: a node still running a script
# that never ends does not act on SIGTERM).
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT
cp "$LOCKKIT" "$work/lockkit" || { echo "no lockkit binary at $LOCKKIT (lcargo build --release -p lockkit-cli)"; exit 1; }
# The skip list is the suite's own --skipfile format (one test name a line); its comment lines
# name no test, so the file is passed as it is (from a path without spaces).
cp "$SKIP" "$work/skip.txt"

# A port free now, its cluster bus port (+10000) too: 10000-29999, below the ephemeral ports and
# the suite's own (run-external.sh draws them from 30000-49999).
free_port() {
  local p
  while :; do
    p=$((10000 + RANDOM % 10000))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && continue
    (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null && continue
    echo $p; return
  done
}

# start_node: a cluster-enabled redis-server on a free port; its port in $port, its pid in pids.
start_node() {
  local d
  for _ in 1 2 3 4 5; do
    port=$(free_port); d="$work/node-$port"; mkdir -p "$d"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "$d/nodes.conf" --cluster-node-timeout 2000 --save '' \
      --appendonly no --daemonize no --dir "$d" --logfile "$d/redis.log" \
      --enable-debug-command yes --enable-protected-configs yes --enable-module-command yes &
    local pid=$!
    for _ in $(seq 100); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && { pids+=("$pid"); return 0; }
      kill -0 $pid 2>/dev/null || break
      sleep 0.05
    done
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
  done
  echo "redis-server did not start"; return 1
}

cluster_ok() {
  for p in "$@"; do
    for _ in $(seq 200); do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q cluster_state:ok && continue 2
      sleep 0.1
    done
    echo "cluster_state never ok on $p"; return 1
  done
}

# The port the unit runs against, in $target.
start_direct() {
  start_node || return 1
  redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
  cluster_ok "$port" && target=$port
}

start_proxy() {
  local ports=() ups=()
  for _ in 1 2 3; do start_node || return 1; ports+=("$port"); ups+=(--upstream "redis://127.0.0.1:$port"); done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${ports[@]}") --cluster-yes \
    > "$work/create.log" 2>&1 || { cat "$work/create.log"; return 1; }
  cluster_ok "${ports[@]}" || return 1
  target=$(free_port)
  "$work/lockkit" proxy --quiet --listen "127.0.0.1:$target" "${ups[@]}" ${PROXY_ARGS:-} \
    > "$work/proxy.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    redis-cli -p "$target" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "lockkit proxy did not start:"; cat "$work/proxy.log"; return 1
}

# Test names as the suite prints them ("[ok]: NAME (N ms)", "[err]: NAME in FILE"), once per
# run and sorted (a unit may run tests of one name several times: scripting runs its tests for
# EVAL and for FCALL); an exception names no test, so its test is read from the stack trace
# ("test {NAME} {" or "test "NAME" {").
names() {
  local plain
  plain="$(sed 's/\x1b\[[0-9;]*m//g' "$1")"
  if [ "$2" = exception ]; then
    awk '/^\[(exception|TIMEOUT|timeout)\]/ {f = 1} f && /^"test ["{]/ {
      sub(/^"test ["{]/, ""); sub(/["}] \{.*$/, ""); print; exit }' <<<"$plain"
  else
    grep "^\[$2\]" <<<"$plain" | sed -E 's/^\[[a-z]+\]: //; s/ \([0-9]+ ms\)$//; s/ in tests\/.*$//' | sort
  fi
}
count() { sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -c "^\[\($2\)\]"; }

mkdir -p "$OUT/direct" "$OUT/proxy"
{
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(nproc) cores, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg), redis-server $(redis-server --version | cut -d' ' -f3)"
  echo "lockkit: $("$work/lockkit" --version 2>/dev/null) $(git -C "$repo" rev-parse --short HEAD 2>/dev/null) ($LOCKKIT)"
  echo "command: bash results/$(basename "$here")/run.sh ${units[*]}"
  echo "skipped on both sides: $(grep -cv '^#\|^$' "$SKIP") tests of $(basename "$SKIP")"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"

table="| unit | direct passed | direct failed | proxy passed | proxy failed | skipped (list) | proxy / direct |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
tot_d=0; tot_p=0
for u in "${units[@]}"; do
  f="$(echo "$u" | tr / _).log"
  for side in direct proxy; do
    stop_all
    "start_$side" || { echo "$u: the $side side did not start"; exit 1; }
    # Up to three times when the suite did not start (its own port, drawn at random, was taken).
    for _ in 1 2 3; do
      SUITE_ARGS="--cluster-mode --singledb --durable --skipfile $work/skip.txt" \
        "$SUITE/run-external.sh" "$target" "$OUT/$side" "$u" > "$work/run.txt"
      sed 's/\x1b\[[0-9;]*m//g' "$OUT/$side/$f" | grep -q "^Testing $u" && break
    done
    stop_all
  done
  d_ok=$(count "$OUT/direct/$f" ok); p_ok=$(count "$OUT/proxy/$f" ok)
  d_err=$(count "$OUT/direct/$f" 'err\|exception\|TIMEOUT\|timeout')
  p_err=$(count "$OUT/proxy/$f" 'err\|exception\|TIMEOUT\|timeout')
  skip=$(count "$OUT/direct/$f" skip)
  ratio=$(awk -v p="$p_ok" -v d="$d_ok" 'BEGIN { if (d > 0) printf "%.1f%%", 100 * p / d; else print "-" }')
  row="| $u | $d_ok | $d_err | $p_ok | $p_err | $skip | $ratio |"
  echo "$row"
  table="$table
$row"
  tot_d=$((tot_d + d_ok)); tot_p=$((tot_p + p_ok))
done
ratio=$(awk -v p="$tot_p" -v d="$tot_d" 'BEGIN { if (d > 0) printf "%.1f%%", 100 * p / d; else print "-" }')
table="$table
| **all** | **$tot_d** | | **$tot_p** | | | **$ratio** |"
echo "$table" > "$OUT/table.md"
{
  echo; echo "$table"; echo
  for side in direct proxy; do
    echo "== failing $side (an exception or a timeout ends its unit: the tests after it did not run)"
    for u in "${units[@]}"; do
      f="$OUT/$side/$(echo "$u" | tr / _).log"
      names "$f" err | sed "s|^|$u: |"
      names "$f" exception | sed "s|^|$u: (exception, the unit stopped) |"
    done
  done
  echo "== passes direct, not through the proxy"
  for u in "${units[@]}"; do
    f="$(echo "$u" | tr / _).log"
    comm -23 <(names "$OUT/direct/$f" ok) <(names "$OUT/proxy/$f" ok) | sed "s|^|$u: |"
  done
} | tee -a "$OUT/summary.txt"
