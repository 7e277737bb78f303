#!/usr/bin/env bash
# `lockkit proxy --plugin observe` vs twemproxy (nutcracker) in front of the same redis-server,
# in the same run, with redis-benchmark: pipelined (-P 16 -c 50) and not (-c 50), SET and GET.
# Each round measures direct, twemproxy and lockkit proxy one after the other (the order turns
# each round, so a neighbour's build slows each of them alike); the summary is the median.
# usage: bash run.sh [LOCKKIT_BIN] [ROUNDS]   (a release build: cargo build --release -p lockkit-cli)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lockkit=${1:-${CARGO_TARGET_DIR:-$PWD/target}/release/lockkit}
rounds=${2:-3}
redis_port=7401 twem_port=7402 proxy_port=7403
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
work=$(mktemp -d)

redis-server --port $redis_port --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null & pids+=($!)
until redis-cli -p $redis_port ping >/dev/null 2>&1; do sleep 0.1; done
cat > "$work/nutcracker.yml" <<YML
bench:
  listen: 127.0.0.1:$twem_port
  hash: fnv1a_64
  distribution: modula
  redis: true
  auto_eject_hosts: false
  timeout: 2000
  servers:
   - 127.0.0.1:$redis_port:1
YML
nutcracker -c "$work/nutcracker.yml" -o "$work/nutcracker.log" -s 7404 & pids+=($!)
"$lockkit" proxy --listen 127.0.0.1:$proxy_port --upstream redis://127.0.0.1:$redis_port \
  --plugin observe --out "$here" --quiet > "$here/proxy.txt" 2>&1 & proxy=$!; pids+=($proxy)
until redis-cli -p $twem_port ping >/dev/null 2>&1; do sleep 0.1; done
until redis-cli -p $proxy_port ping >/dev/null 2>&1; do sleep 0.1; done

{ echo "date: $(date -u +%FT%TZ)"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"
  echo "twemproxy: $(nutcracker --version 2>&1 | head -1)"
  echo "lockkit: $("$lockkit" --version) ($lockkit), proxy: --plugin observe, default threads"
  echo "benchmark: redis-benchmark -t set,get -c 50 -r 100000 [-P 16 -n 2000000 | -n 300000] --csv, $rounds rounds"
} > "$here/machine.txt"

bench() { # port pipeline
  if [ "$2" = 16 ]; then
    redis-benchmark -p "$1" -t set,get -c 50 -r 100000 -P 16 -n 2000000 --csv -q
  else
    redis-benchmark -p "$1" -t set,get -c 50 -r 100000 -n 300000 --csv -q
  fi
}
: > "$here/raw.csv"
echo '"round","target","pipeline","test","rps"' > "$here/raw.csv"
targets=(direct:$redis_port twemproxy:$twem_port lockkit-proxy:$proxy_port)
for round in $(seq 1 "$rounds"); do
  for pipeline in 16 1; do
    for i in 0 1 2; do
      t=${targets[$(( (i + round) % 3 ))]}
      name=${t%%:*} port=${t##*:}
      bench "$port" "$pipeline" | grep -v '^"test"' | while IFS=, read -r test rps _; do
        echo "$round,\"$name\",$pipeline,$test,$rps" >> "$here/raw.csv"
        echo "round $round $name -P $pipeline $test $rps"
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
kill -TERM $proxy; wait $proxy || true

# Medians per target, pipeline and test.
python3 - "$here/raw.csv" > "$here/summary.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault((r["pipeline"], r["test"], r["target"]), []).append(float(r["rps"]))
print(f'{"pipeline":>8} {"test":>4} {"target":>14} {"median rps":>11}  rounds')
for (p, t, name), v in sorted(by.items(), key=lambda kv: (-int(kv[0][0]), kv[0][1], kv[0][2])):
    print(f'{p:>8} {t:>4} {name:>14} {statistics.median(v):>11,.0f}  {", ".join(f"{x:,.0f}" for x in v)}')
PY
cat "$here/summary.txt"
