#!/usr/bin/env bash
# Usage: bash run.sh ROUNDS BIN...   (each BIN a lockkit binary; ROUNDS at most 20)
# The input of results/2026-12-06-2115-harness-speed (100,001 lines: SCRIPT LOAD of lua/release.lua,
# then 50,000 pairs of SET NX PX and EVALSHA). Per round, in this order: redis-cli feeding a fresh
# redis-server as the scheduler places them (the issue's baseline), then each BIN's `lua exec`, then
# redis-cli again with client and server pinned to one CPU and to two CPUs (`taskset`), the load
# average read before each. Prints one line per run, then the medians and the ratios of medians.
set -euo pipefail
rounds=$1; shift
(( rounds >= 1 && rounds <= 20 )) || { echo "ROUNDS: 1 to 20" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/../2026-12-06-2115-harness-speed/gen.py" "$here/../../lua/release.lua" > "$work/input.txt"
port=6479
secs() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); echo "$e - $s" | bc; }
load() { cut -d' ' -f1 /proc/loadavg; }
cli() { # cli SERVER_CPUS CLIENT_CPUS OUT [FLAG]: redis-cli into a fresh redis-server, its wall time
  local sc=$1 cc=$2 out=$3 flag=${4:-}
  ${sc:+taskset -c $sc} redis-server --port $port --save "" --appendonly no --daemonize yes >/dev/null
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
  secs sh -c "${cc:+taskset -c $cc} timeout 120 redis-cli $flag -p $port < '$work/input.txt' > '$out'"
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  sleep 0.2
}
# The expected output, once: redis-cli --no-raw prints replies as `lua exec` does.
cli 0 0 "$work/expected.out" --no-raw >/dev/null
for r in $(seq 1 "$rounds"); do
  l=$(load); t=$(cli "" "" "$work/cli.out")
  echo "round $r load $l redis-cli $t"; echo "redis-cli $t" >> "$work/times"
  for bin in "$@"; do
    l=$(load); t=$(secs sh -c "timeout 60 '$bin' lua exec '$work/input.txt' > '$work/bin.out'")
    cmp -s "$work/expected.out" "$work/bin.out" || { echo "$bin: output differs from redis-cli --no-raw's" >&2; exit 1; }
    echo "round $r load $l $(basename "$bin") $t = $(echo "scale=2; $(grep '^redis-cli ' "$work/times" | tail -1 | cut -d' ' -f2) / $t" | bc)x"
    echo "$(basename "$bin") $t" >> "$work/times"
  done
  l=$(load); t=$(cli 0 0 "$work/cli.out"); echo "round $r load $l redis-cli-one-cpu $t"; echo "redis-cli-one-cpu $t" >> "$work/times"
  l=$(load); t=$(cli 0 1 "$work/cli.out"); echo "round $r load $l redis-cli-two-cpus $t"; echo "redis-cli-two-cpus $t" >> "$work/times"
done
echo "medians:"
median() { grep "^$1 " "$work/times" | cut -d' ' -f2 | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
base=$(median redis-cli)
for name in redis-cli redis-cli-one-cpu redis-cli-two-cpus $(for b in "$@"; do basename "$b"; done); do
  m=$(median "$name"); echo "  $name ${m}s = $(echo "scale=2; $base / $m" | bc)x of redis-cli's median"
done
