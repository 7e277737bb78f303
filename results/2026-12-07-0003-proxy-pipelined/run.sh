#!/usr/bin/env bash
# Issue 42, the proxy's pipelined forward path: redis-server direct, twemproxy and `lockkit proxy`
# with no flags (one shared upstream connection, one thread) built from each BIN given, one
# redis-server, interleaved (the order turning each round): redis-benchmark -t set,get -c 50
# -r 100000 -P 16 -n N. Then, for each BIN, `strace -c -f` of its proxy over one -P 16 run of
# -n 100000 per test: system calls per request (strace slows the proxy: those req/s are not
# figures). Release builds.
# usage: bash run.sh ROUNDS BIN...   (N=300000 by default; OUT=DIR writes there)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
rounds=$1; shift
n=${N:-300000}
. "$here/../2026-12-02-0116-proxy-speed/servers.sh"
start_redis 7741
start_twemproxy 7742 7741 7743
targets=(direct:7741 twemproxy:7742)
port=7750
for b in "$@"; do
  "$b" proxy --listen "127.0.0.1:$port" --upstream "redis://127.0.0.1:7741" --quiet \
    > "$work/p$port.txt" 2>&1 & pids+=($!)
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.1; done
  targets+=("$(basename "$b"):$port"); port=$((port + 1))
done
write_machine "$out/machine.txt" "redis-benchmark -t set,get -c 50 -r 100000 -P 16 -n $n --csv against direct, twemproxy and lockkit proxy (no flags) of: $*; $rounds rounds; then strace -c -f of each proxy over -n 100000"
echo 'round,target,test,rps' > "$out/raw.csv"
count=${#targets[@]}
for round in $(seq 1 "$rounds"); do
  for i in $(seq 0 $((count - 1))); do
    IFS=: read -r name p <<< "${targets[$(( (i + round) % count ))]}"
    timeout 120 redis-benchmark -p "$p" -t set,get -c 50 -r 100000 -P 16 -n "$n" --csv -q 2>/dev/null \
      | grep -v '^"test"' | cut -d, -f1,2 | tr -d '"' | while IFS=, read -r test rps; do
        echo "$round,$name,$test,$rps" | tee -a "$out/raw.csv"; done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
# System calls of the proxy per request (200,000 requests: 100,000 SET, 100,000 GET).
port=7760
for b in "$@"; do
  name=$(basename "$b")
  strace -c -f -o "$out/strace-$name.txt" "$b" proxy --listen "127.0.0.1:$port" \
    --upstream "redis://127.0.0.1:7741" --quiet > "$work/s$port.txt" 2>&1 & spid=$!
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.1; done
  timeout 300 redis-benchmark -p $port -t set,get -c 50 -r 100000 -P 16 -n 100000 -q >/dev/null 2>&1
  kill "$(pgrep -P $spid | head -1)"; wait $spid || true
  port=$((port + 1))
done
python3 - "$out" "$@" > "$out/summary.txt" <<'PY'
import csv, os, re, statistics, sys
out, bins = sys.argv[1], [os.path.basename(b) for b in sys.argv[2:]]
rows = list(csv.DictReader(open(os.path.join(out, 'raw.csv'))))
med = {}
for r in rows:
    med.setdefault((r['test'], r['target']), []).append(float(r['rps']))
for test in ('SET', 'GET'):
    tw = statistics.median(med[(test, 'twemproxy')])
    di = statistics.median(med[(test, 'direct')])
    for name in ['direct', 'twemproxy'] + bins:
        v = med[(test, name)]
        m = statistics.median(v)
        print(f"-P 16 {test} {name:<22} median {m:>10,.0f} req/s  {m / tw:.2f}x twemproxy  {m / di:.2f}x direct  (rounds: {', '.join(f'{x:,.0f}' for x in v)})")
for name in bins:
    calls = {}
    for line in open(os.path.join(out, f'strace-{name}.txt')):
        f = line.split()
        if len(f) >= 5 and re.fullmatch(r'[0-9.]+', f[0]) and f[-1].isidentifier():
            calls[f[-1]] = int(f[3])
    per = lambda s: calls.get(s, 0) / 200000
    print(f"{name}: per request sendto {per('sendto'):.3f}, recvfrom {per('recvfrom'):.3f}, epoll_wait {per('epoll_wait'):.4f}, writev {per('writev'):.3f}")
PY
cat "$out/summary.txt"
