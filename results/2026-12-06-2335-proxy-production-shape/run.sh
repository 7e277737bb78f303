#!/usr/bin/env bash
# The proxy as production runs it (`--requirepass`, `--metrics-listen`, `--plugin observe`) next
# to the same proxy with none of them and to twemproxy, one redis-server, interleaved (the order
# turning each round): redis-benchmark -t set,get -c 50 -r 100000, unpipelined (-n 100000) and
# -P 16 (-n 1000000). Before-only: issue 42's proxy step, measured and not started.
# usage: bash run.sh LOCKKIT_BIN [ROUNDS]   (a release build); OUT=DIR writes there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
bin=$1 rounds=${2:-3}
redis_port=7641 twem_port=7642 prod_port=7643 plain_port=7645
. "$here/../2026-12-02-0116-proxy-speed/servers.sh"
start_redis $redis_port
start_twemproxy $twem_port $redis_port 7646
"$bin" proxy --listen "127.0.0.1:$prod_port" --upstream "redis://127.0.0.1:$redis_port" \
  --plugin observe --out "$work" --quiet --requirepass bench-secret \
  --metrics-listen 127.0.0.1:7644 > "$work/proxy-prod.txt" 2>&1 & pids+=($!)
"$bin" proxy --listen "127.0.0.1:$plain_port" --upstream "redis://127.0.0.1:$redis_port" \
  --quiet > "$work/proxy-plain.txt" 2>&1 & pids+=($!)
until redis-cli -p $prod_port -a bench-secret --no-auth-warning ping >/dev/null 2>&1; do sleep 0.1; done
until redis-cli -p $plain_port ping >/dev/null 2>&1; do sleep 0.1; done
write_machine "$out/machine.txt" "redis-benchmark -t set,get -c 50 -r 100000 [-n 100000 | -P 16 -n 1000000] --csv against twemproxy, lockkit proxy --requirepass --metrics-listen --plugin observe (lockkit-prod), lockkit proxy with none (lockkit-plain); $rounds rounds; lockkit: $bin"
echo 'round,target,pipeline,test,rps' > "$out/raw.csv"
targets=(twemproxy:$twem_port lockkit-prod:$prod_port lockkit-plain:$plain_port)
for round in $(seq 1 "$rounds"); do
  for pipeline in 1 16; do
    n=100000; [ $pipeline = 16 ] && n=1000000
    for i in 0 1 2; do
      IFS=: read -r name port <<< "${targets[$(( (i + round) % 3 ))]}"
      auth=(); [ "$name" = lockkit-prod ] && auth=(-a bench-secret)
      redis-benchmark -p "$port" "${auth[@]}" -t set,get -c 50 -r 100000 -P $pipeline -n $n --csv -q 2>/dev/null \
        | grep -v '^"test"' | cut -d, -f1,2 | tr -d '"' | while IFS=, read -r test rps; do
          echo "$round,$name,$pipeline,$test,$rps" | tee -a "$out/raw.csv"; done
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
python3 - "$out/raw.csv" > "$out/summary.txt" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for r in rows:
    med.setdefault((r['pipeline'], r['test'], r['target']), []).append(float(r['rps']))
for (p, t, name), v in sorted(med.items()):
    tw = statistics.median(med[(p, t, 'twemproxy')])
    m = statistics.median(v)
    print(f"-P {p:>2} {t:<4} {name:<14} median {m:>10,.0f} req/s  {m / tw:.2f}x twemproxy  (rounds: {', '.join(f'{x:,.0f}' for x in v)})")
PY
cat "$out/summary.txt"
