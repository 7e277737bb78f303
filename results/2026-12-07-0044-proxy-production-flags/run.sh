#!/usr/bin/env bash
# Issue 42, the proxy in its production shape: `lockkit proxy --requirepass --metrics-listen
# --plugin observe` before and after the change, each of the three flags alone (before), the
# plain proxy and twemproxy, one redis-server, interleaved (the order turning each round):
# redis-benchmark -t set,get -c 50 -r 100000, unpipelined (-n 100000) and -P 16 (-n 500000).
# Then, one target at a time, `perf stat -p` of the proxy's process over one unpipelined run
# (200,000 requests) and one -P 16 run (1,000,000): CPU time, context switches and system calls
# per request.
# usage: bash run.sh BEFORE_BIN AFTER_BIN [ROUNDS]   (release builds); OUT=DIR writes there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
before=$1 after=$2 rounds=${3:-3}
n1=${N1:-100000} np=${NP:-500000}   # requests per test (smaller for a quick check)
base=${BASE_PORT:-17640}
redis_port=$base twem_port=$((base + 1))
. "$here/../2026-12-02-0116-proxy-speed/servers.sh"
start_redis $redis_port
start_twemproxy $twem_port $redis_port $((base + 2))
pass=bench-secret
declare -A port pid auth
port[twemproxy]=$twem_port pid[twemproxy]=$twem_pid auth[twemproxy]=0
next=$((base + 3))
# proxy NAME BIN [FLAGS...]: `lockkit proxy` on the next free port.
proxy() {
  local name=$1 bin=$2; shift 2
  local p=$next; next=$((next + 2))
  local flags=()
  for f in "$@"; do
    case $f in
      auth) flags+=(--requirepass "$pass") ;;
      metrics) flags+=(--metrics-listen "127.0.0.1:$((p + 1))") ;;
      observe) mkdir -p "$work/$name"; flags+=(--plugin observe --out "$work/$name") ;;
    esac
  done
  "$bin" proxy --listen "127.0.0.1:$p" --upstream "redis://127.0.0.1:$redis_port" --quiet \
    "${flags[@]}" > "$work/proxy-$name.txt" 2>&1 & pids+=($!)
  port[$name]=$p pid[$name]=$! auth[$name]=0
  [[ " $* " == *" auth "* ]] && auth[$name]=1
  until redis-cli -p "$p" -a "$pass" --no-auth-warning ping 2>/dev/null | grep -q PONG; do sleep 0.1; done
}
proxy plain "$before"
proxy auth "$before" auth
proxy metrics "$before" metrics
proxy observe "$before" observe
proxy prod-before "$before" auth metrics observe
proxy prod-after "$after" auth metrics observe
proxy metrics-after "$after" metrics
targets=(twemproxy plain auth metrics observe prod-before prod-after metrics-after)
write_machine "$out/machine.txt" "redis-benchmark -t set,get -c 50 -r 100000 [-n 100000 | -P 16 -n 500000] --csv, $rounds rounds, against twemproxy and lockkit proxy: plain, --requirepass (auth), --metrics-listen (metrics), --plugin observe (observe), all three (prod-before) from $before; all three (prod-after) and --metrics-listen (metrics-after) from $after; then perf stat -p per target"
# bench NAME PIPELINE N: redis-benchmark against target NAME, its CSV lines.
bench() {
  local a=(); [ "${auth[$1]}" = 1 ] && a=(-a "$pass")
  redis-benchmark -p "${port[$1]}" "${a[@]}" -t set,get -c 50 -r 100000 -P "$2" -n "$3" --csv -q 2>/dev/null \
    | grep -v '^"test"' | cut -d, -f1,2 | tr -d '"'
}
echo 'round,target,pipeline,test,rps' > "$out/raw.csv"
count=${#targets[@]}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    n=$n1; [ "$pipeline" = 16 ] && n=$np
    for i in $(seq 0 $((count - 1))); do
      name=${targets[$(( (i + round) % count ))]}
      bench "$name" "$pipeline" "$n" | while IFS=, read -r test rps; do
        echo "$round,$name,$pipeline,$test,$rps" | tee -a "$out/raw.csv"; done
    done
  done
done
echo 'target,pipeline,requests,task_clock_ms,context_switches,syscalls' > "$out/counters.csv"
for name in "${targets[@]}"; do
  for pipeline in 1 16; do
    n=$n1; [ "$pipeline" = 16 ] && n=$np
    perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "${pid[$name]}" \
      -o "$work/perf-$name-$pipeline.txt" & perf_pid=$!
    sleep 0.3
    bench "$name" "$pipeline" "$n" > /dev/null
    kill -INT $perf_pid; wait $perf_pid || true
    f="$work/perf-$name-$pipeline.txt"
    val() { grep ",$1," "$f" | head -1 | cut -d, -f1; }
    echo "$name,$pipeline,$((2 * n)),$(val task-clock),$(val context-switches),$(val raw_syscalls:sys_enter)" \
      | tee -a "$out/counters.csv"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
python3 - "$out/raw.csv" "$out/counters.csv" > "$out/summary.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for r in rows:
    med.setdefault((r['pipeline'], r['test'], r['target']), []).append(float(r['rps']))
for (p, t, name), v in sorted(med.items()):
    tw = statistics.median(med[(p, t, 'twemproxy')])
    m = statistics.median(v)
    print(f"-P {p:>2} {t:<4} {name:<14} median {m:>10,.0f} req/s  {m / tw:.2f}x twemproxy  (rounds: {', '.join(f'{x:,.0f}' for x in v)})")
print()
for r in csv.DictReader(open(sys.argv[2])):
    n = float(r['requests'])
    f = lambda k: float(r[k]) if r[k] not in ('', '<not counted>', '<not supported>') else float('nan')
    print(f"-P {r['pipeline']:>2} {r['target']:<14} {1000 * f('task_clock_ms') / n:6.2f} µs CPU, "
          f"{f('context_switches') / n:6.3f} context switches, {f('syscalls') / n:6.3f} system calls per request")
PY
cat "$out/summary.txt"
