#!/usr/bin/env bash
# Redlock over 3 local redis-servers (50 clients, 100k keys, hold 0, TTL 5 s, one try per cycle,
# 1 s warm-up + 5 s measured), with the CPU, syscalls, commands and bytes of every process:
# each lockkit build, rslock 0.10.0 and node-redlock 4.2.0 on the same three nodes, interleaved,
# ROUNDS rounds. Per run: `perf stat` on each redis-server (-p) and on the client, the servers'
# INFO commandstats/stats (reset before the run), the client's report.
# usage: bash run.sh ROUNDS LABEL=LOCKKIT_BIN[:EXTRA BENCH ARGS] [...]   (release builds)
# Needs: the peers of ../2026-12-06-2300-redlock-peers/peers (rslock built:
# `cargo build --release --manifest-path .../peers/rslock/Cargo.toml`, binary in $RSLOCK or
# $CARGO_TARGET_DIR/release/rslock-peer; node-redlock: `npm ci` in a copy of its folder, in
# $NODE_PEER, default that folder). OUT=DIR writes there instead of beside this script.
# Then: python3 summarize.py DIR > DIR/summary.md
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
out=$(out_dir "$here" "${OUT:-}")
rounds=$1; shift
peers=$here/../2026-12-06-2300-redlock-peers/peers
rslock=${RSLOCK:-${CARGO_TARGET_DIR:-$here/../../target}/release/rslock-peer}
node_peer=${NODE_PEER:-$peers/node-redlock}
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
write_machine "$out/machine.txt" "lockkit bench ${urls[*]} --clients 50 --keys 100k --hold 0 --ttl 5s --duration 5s --warmup 1s; rslock-peer 5 URL x3; node redlock_peer.js 5 PORT x3; perf stat -p each server and on the client"
events=task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait
# measure NAME CMD...: flush and reset the servers, perf stat them and the client while it runs.
measure() {
  local name=$1; shift
  for p in "${ports[@]}"; do redis-cli -p "$p" flushall >/dev/null; redis-cli -p "$p" config resetstat >/dev/null; done
  sleep 0.5
  local perfs=() i=0
  for pid in "${pids[@]}"; do
    i=$((i + 1))
    perf stat -x, -e "$events" -p "$pid" -o "$out/$name.node$i.perf" & perfs+=($!)
  done
  sleep 0.2
  perf stat -x, -e "$events" -o "$out/$name.client.perf" -- "$@" > "$out/$name.txt" 2>&1 \
    || echo "$name failed" >> "$out/summary.txt"
  for p in "${perfs[@]}"; do kill -INT "$p"; done
  wait "${perfs[@]}" 2>/dev/null || true
  i=0
  for p in "${ports[@]}"; do
    i=$((i + 1))
    { redis-cli -p "$p" info commandstats; redis-cli -p "$p" info stats; } | tr -d '\r' > "$out/$name.node$i.info"
  done
  echo "$name: $(grep -m1 -i 'cycles/s' "$out/$name.txt" || true)" | tee -a "$out/summary.txt"
}
: > "$out/summary.txt"
for r in $(seq 1 "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*} rest=${spec#*=}
    bin=${rest%%:*} extra=${rest#"${rest%%:*}"}
    read -r -a extra <<< "${extra#:}"
    measure "r$r-$label" "$bin" bench "${urls[@]}" --clients 50 --keys 100k --hold 0 --ttl 5s \
      --duration 5s --warmup 1s --json "$out/r$r-$label.json" "${extra[@]}"
  done
  measure "r$r-rslock" "$rslock" 5 redis://127.0.0.1:7311 redis://127.0.0.1:7312 redis://127.0.0.1:7313
  measure "r$r-node-redlock" node "$node_peer/redlock_peer.js" 5 "${ports[@]}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/machine.txt"
