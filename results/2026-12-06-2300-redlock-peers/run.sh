#!/usr/bin/env bash
# Redlock over 3 local redis-servers (50 clients, 100k keys, hold 0, TTL 5 s, one try per cycle,
# 1 s warm-up + 5 s measured): lockkit builds against rslock 0.10.0 and node-redlock 4.2.0 on
# the same three nodes, interleaved, ROUNDS rounds; each run's line in summary.txt.
# usage: bash run.sh ROUNDS LABEL=LOCKKIT_BIN [LABEL=LOCKKIT_BIN...]   (release builds)
# Needs: peers/rslock built (`cargo build --release --manifest-path peers/rslock/Cargo.toml`,
# binary in $RSLOCK or $CARGO_TARGET_DIR/release/rslock-peer) and `npm install` in
# peers/node-redlock. OUT=DIR writes there instead of beside this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
rounds=$1; shift
rslock=${RSLOCK:-${CARGO_TARGET_DIR:-$here/../../target}/release/rslock-peer}
ports=(7311 7312 7313)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for p in "${ports[@]}"; do
  redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --logfile /dev/null & pids+=($!)
done
for p in "${ports[@]}"; do until redis-cli -p "$p" ping >/dev/null 2>&1; do sleep 0.1; done; done
# The delayed-restart rule keeps a node out for a TTL (5 s here) after it starts.
sleep 6
urls=(--url redis://127.0.0.1:7311 --url redis://127.0.0.1:7312 --url redis://127.0.0.1:7313)
write_machine "$out/machine.txt" "lockkit bench ${urls[*]} --clients 50 --keys 100k --hold 0 --ttl 5s --duration 5s --warmup 1s; rslock-peer 5 URL x3; node redlock_peer.js 5 PORT x3"
flush() { for p in "${ports[@]}"; do redis-cli -p "$p" flushall >/dev/null; done; sleep 0.5; }
: > "$out/summary.txt"
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*} bin=${spec#*=}
    flush
    "$bin" bench "${urls[@]}" --clients 50 --keys 100k --hold 0 --ttl 5s --duration 5s --warmup 1s \
      --json "$out/r$r-$label.json" > "$out/r$r-$label.txt" 2>&1 || echo "r$r $label failed" >> "$out/summary.txt"
    echo "r$r $label: $(grep -m1 -i 'cycles/s' "$out/r$r-$label.txt" || true)" | tee -a "$out/summary.txt"
  done
  flush
  "$rslock" 5 redis://127.0.0.1:7311 redis://127.0.0.1:7312 redis://127.0.0.1:7313 \
    > "$out/r$r-rslock.txt" 2>&1 || echo "r$r rslock failed" >> "$out/summary.txt"
  echo "r$r rslock: $(cat "$out/r$r-rslock.txt")" | tee -a "$out/summary.txt"
  flush
  node "$here/peers/node-redlock/redlock_peer.js" 5 "${ports[@]}" \
    > "$out/r$r-node-redlock.txt" 2>&1 || echo "r$r node-redlock failed" >> "$out/summary.txt"
  echo "r$r node-redlock: $(cat "$out/r$r-node-redlock.txt")" | tee -a "$out/summary.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
