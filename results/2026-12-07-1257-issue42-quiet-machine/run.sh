#!/usr/bin/env bash
# Issue 42's three unmet goals measured again, one after the other, on a machine with nothing else
# running (no helpers, no builds), with one release build of main (BIN):
#   1. `lockkit lua exec` on 100k lines of SET NX + EVALSHA against redis-server fed by redis-cli
#      (../2026-12-07-0600-lua-exec-speed/run.sh, ROUNDS rounds) -> lua-exec.txt
#   2. the proxy in its production shape against twemproxy, redis-benchmark -c 50 SET/GET,
#      unpipelined and -P 16 (../2026-12-07-0600-proxy-metrics-batched/run.sh, BIN as both builds)
#      -> proxy/
#   3. Redlock over 3 nodes against rslock and node-redlock
#      (../2026-12-07-0530-redlock-server-cost/run.sh; RSLOCK and NODE_PEER as that script says)
#      -> redlock/
# usage: bash run.sh BIN [ROUNDS]   (ROUNDS default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "$1") rounds=${2:-3}
[ -x "$bin" ] || { echo "BIN: a lockkit release binary (cargo build --release -p lockkit-cli)" >&2; exit 2; }
source "$here/../lib.sh"
write_machine "$here/machine.txt" "bash run.sh $1 $rounds"
echo "== lua exec ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"
bash "$here/../2026-12-07-0600-lua-exec-speed/run.sh" "$rounds" "$bin" | tee "$here/lua-exec.txt.tmp"
mv "$here/lua-exec.txt.tmp" "$here/lua-exec.txt"
echo "== proxy ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"
OUT="$here/proxy" bash "$here/../2026-12-07-0600-proxy-metrics-batched/run.sh" "$bin" "$bin" "$rounds"
echo "== redlock ($(date -u +%T), load $(cut -d' ' -f1 /proc/loadavg))"
OUT="$here/redlock" bash "$here/../2026-12-07-0530-redlock-server-cost/run.sh" "$rounds" lockkit="$bin"
python3 "$here/../2026-12-07-0530-redlock-server-cost/summarize.py" "$here/redlock" > "$here/redlock/summary.md"
cat "$here/redlock/summary.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$here/machine.txt"
