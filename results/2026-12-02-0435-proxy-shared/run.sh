#!/usr/bin/env bash
# Unpipelined and pipelined speed of `lockkit proxy --plugin observe` with a shared upstream
# connection (the default, with the default threads and with --threads 1) and without
# (`--shared-connections 0`: one upstream connection per client, the old behaviour), next to
# twemproxy (nutcracker) and the server direct: one redis-server, all five targets measured in
# the same run, the order turning each
# round. Besides requests/s it records the CPU time each request costs the proxy process and
# redis-server (`perf stat -e task-clock` attached to each for the length of one
# redis-benchmark run), which a busy neighbour disturbs far less than requests/s.
# The servers are started by ../2026-12-02-0116-proxy-speed/servers.sh (same set-up as that run).
# usage: bash run.sh LOCKKIT_BIN [ROUNDS]   (a release build: cargo build --release -p lockkit-cli)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1 rounds=${2:-3}
redis_port=7621 twem_port=7622 own_port=7623 shared_port=7624 t1_port=7625
. "$here/../2026-12-02-0116-proxy-speed/servers.sh"

# start_proxy PORT FLAGS...: `lockkit proxy --plugin observe FLAGS`; sets lockkit_pid
start_proxy() {
  local port=$1; shift
  "$bin" proxy --listen "127.0.0.1:$port" --upstream "redis://127.0.0.1:$redis_port" \
    --plugin observe --out "$work" --quiet "$@" > "$work/proxy-$port.txt" 2>&1 &
  lockkit_pid=$!; pids+=($lockkit_pid)
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
}

start_redis $redis_port
start_twemproxy $twem_port $redis_port 7626
start_proxy $own_port --shared-connections 0; own_pid=$lockkit_pid
start_proxy $shared_port; shared_pid=$lockkit_pid
start_proxy $t1_port --threads 1; t1_pid=$lockkit_pid

{ echo "date: $(date -u +%FT%TZ)"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -sr)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "server: $(redis-server --version)"
  echo "twemproxy: $(nutcracker --version 2>&1 | head -1)"
  echo "lockkit: $("$bin" --version) ($bin, commit $(git -C "$here" rev-parse --short HEAD)), --plugin observe, default threads;"
  echo "  lockkit-own: --shared-connections 0; lockkit-shared: default (1 shared connection); lockkit-shared-t1: default and --threads 1"
  echo "benchmark: redis-benchmark -t get|set -c 50 -r 100000 [-n 100000 | -P 16 -n 1000000] --csv, $rounds rounds"
} > "$here/machine.txt"

# port pipeline test -> rps
bench() {
  local n=100000
  [ "$2" = 16 ] && n=1000000
  redis-benchmark -p "$1" -t "$3" -c 50 -r 100000 -P "$2" -n $n --csv -q \
    | grep -v '^"test"' | cut -d, -f2 | tr -d '"'
}
cpu_ms() { awk -F, '/task-clock/ { print $1 }' "$1"; }

echo 'round,target,pipeline,test,requests,rps,proxy_cpu_ms,redis_cpu_ms' > "$here/raw.csv"
targets=(direct:$redis_port:0 twemproxy:$twem_port:$twem_pid lockkit-own:$own_port:$own_pid
         lockkit-shared:$shared_port:$shared_pid lockkit-shared-t1:$t1_port:$t1_pid)
count=${#targets[@]}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    for test in get set; do
      for i in $(seq 0 $((count - 1))); do
        IFS=: read -r name port pid <<< "${targets[$(( (i + round) % count ))]}"
        n=100000; [ $pipeline = 16 ] && n=1000000
        perf stat -x, -e task-clock -p $redis_pid -o "$work/redis.perf" & rs=$!
        ps_=""
        if [ "$pid" != 0 ]; then perf stat -x, -e task-clock -p "$pid" -o "$work/proxy.perf" & ps_=$!; fi
        sleep 0.2
        rps=$(bench "$port" $pipeline $test)
        kill -INT $rs $ps_; wait $rs $ps_ 2>/dev/null || true
        pc=0; [ -n "$ps_" ] && pc=$(cpu_ms "$work/proxy.perf")
        rc=$(cpu_ms "$work/redis.perf")
        echo "$round,$name,$pipeline,$test,$n,$rps,$pc,$rc" >> "$here/raw.csv"
        echo "round $round -P $pipeline $test $name: $rps req/s"
      done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"

# Medians per target; the CPU columns exclude perf's 0.2 s lead-in (idle: near zero CPU).
python3 - "$here/raw.csv" > "$here/summary.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault((int(r["pipeline"]), r["test"], r["target"]), []).append(r)
order = ["direct", "twemproxy", "lockkit-own", "lockkit-shared", "lockkit-shared-t1"]
print(f'{"-P":>3} {"test":>4} {"target":>17} {"median rps":>11} {"x twemproxy":>11} {"proxy us/req":>12} {"redis us/req":>12}  rps of each round')
for (p, t) in sorted({(k[0], k[1]) for k in by}):
    twem = statistics.median(float(r["rps"]) for r in by[(p, t, "twemproxy")])
    for name in order:
        rs = by[(p, t, name)]
        rps = statistics.median(float(r["rps"]) for r in rs)
        pus = statistics.median(float(r["proxy_cpu_ms"]) * 1000 / int(r["requests"]) for r in rs)
        rus = statistics.median(float(r["redis_cpu_ms"]) * 1000 / int(r["requests"]) for r in rs)
        each = ", ".join(f'{float(r["rps"]):,.0f}' for r in rs)
        print(f'{p:>3} {t:>4} {name:>17} {rps:>11,.0f} {rps / twem:>10.2f}x {pus:>12.2f} {rus:>12.2f}  {each}')
PY
cat "$here/summary.txt"
