#!/usr/bin/env bash
# Issue 42: the proxy in its production shape (`--requirepass --metrics-listen --plugin observe`)
# before and after the command metrics were batched per read, with the plain proxy (no flags)
# and twemproxy, one redis-server, interleaved (the order turning each round):
# redis-benchmark -t set,get -c 50 -r 100000, unpipelined (-n 100000) and -P 16 (-n 500000).
# Every run also records the CPU time (user + system, from /proc) that each process spent in
# it: redis-benchmark, redis-server, and the target (twemproxy or the proxy), per request.
# usage: bash run.sh BEFORE_BIN AFTER_BIN [ROUNDS]   (release builds); OUT=DIR writes there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
before=$1 after=$2 rounds=${3:-3}
n1=${N1:-100000} np=${NP:-500000}
base=${BASE_PORT:-17740}
redis_port=$base twem_port=$((base + 1))
. "$here/../2026-12-02-0116-proxy-speed/servers.sh"
start_redis $redis_port
start_twemproxy $twem_port $redis_port $((base + 2))
pass=bench-secret
declare -A port pid auth
port[twemproxy]=$twem_port pid[twemproxy]=$twem_pid auth[twemproxy]=0
next=$((base + 3))
# proxy NAME BIN [prod]: `lockkit proxy` on the next free port (prod: the three flags).
proxy() {
  local name=$1 bin=$2 p=$next; next=$((next + 2))
  local flags=()
  if [ "${3:-}" = prod ]; then
    mkdir -p "$work/$name"
    flags=(--requirepass "$pass" --metrics-listen "127.0.0.1:$((p + 1))" --plugin observe --out "$work/$name")
  fi
  "$bin" proxy --listen "127.0.0.1:$p" --upstream "redis://127.0.0.1:$redis_port" --quiet \
    "${flags[@]}" > "$work/proxy-$name.txt" 2>&1 & pids+=($!)
  port[$name]=$p pid[$name]=$! auth[$name]=0
  [ "${3:-}" = prod ] && auth[$name]=1
  until redis-cli -p "$p" -a "$pass" --no-auth-warning ping 2>/dev/null | grep -q PONG; do sleep 0.1; done
}
proxy prod-before "$before" prod
proxy prod-after "$after" prod
proxy plain-after "$after"
targets=(twemproxy prod-before prod-after plain-after)
write_machine "$out/machine.txt" "redis-benchmark -t set,get -c 50 -r 100000 [-n $n1 | -P 16 -n $np] --csv, $rounds rounds, against twemproxy and lockkit proxy --requirepass --metrics-listen --plugin observe from $before (prod-before) and $after (prod-after), and lockkit proxy with no flags from $after (plain-after); CPU of every process per run from /proc"
tck=$(getconf CLK_TCK)
# cpu PID: user + system clock ticks so far (children included for redis-benchmark's shell).
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
echo 'round,target,pipeline,test,rps' > "$out/raw.csv"
echo 'round,target,pipeline,requests,wall_s,bench_cpu_s,server_cpu_s,target_cpu_s' > "$out/cpu.csv"
count=${#targets[@]}
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    n=$n1; [ "$pipeline" = 16 ] && n=$np
    for i in $(seq 0 $((count - 1))); do
      name=${targets[$(( (i + round) % count ))]}
      a=(); [ "${auth[$name]}" = 1 ] && a=(-a "$pass")
      s0=$(cpu $redis_pid) t0=$(cpu ${pid[$name]}) w0=$(date +%s.%N)
      # redis-benchmark's own CPU: GNU time's user + system of that one process.
      /usr/bin/time -f '%U %S' -o "$work/bench-time.txt" \
        redis-benchmark -p "${port[$name]}" "${a[@]}" -t set,get -c 50 -r 100000 -P "$pipeline" -n "$n" --csv -q \
        2>/dev/null > "$work/bench.csv"
      w1=$(date +%s.%N) s1=$(cpu $redis_pid) t1=$(cpu ${pid[$name]})
      grep -v '^"test"' "$work/bench.csv" | cut -d, -f1,2 | tr -d '"' | while IFS=, read -r test rps; do
        echo "$round,$name,$pipeline,$test,$rps" | tee -a "$out/raw.csv"; done
      b=$(awk '{print $1 + $2}' "$work/bench-time.txt")
      echo "$round,$name,$pipeline,$((2 * n)),$(echo "$w1 - $w0" | bc),$b,$(echo "($s1 - $s0) / $tck" | bc -l),$(echo "($t1 - $t0) / $tck" | bc -l)" >> "$out/cpu.csv"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
python3 "$here/summary.py" "$out/raw.csv" "$out/cpu.csv" > "$out/summary.txt"
cat "$out/summary.txt"
