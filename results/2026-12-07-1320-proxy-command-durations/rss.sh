#!/usr/bin/env bash
# The proxy's resident memory (VmRSS) with --requirepass --metrics-listen --plugin observe, once a
# second while redis-benchmark sends 4M GETs at -P 16 over 50 connections (bounded: 30 s at most),
# then 6 s after it (past the exporter's 5 s upkeep). One redis-server, each BIN in turn.
# usage: bash rss.sh BIN...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib.sh"
start_server 17960
work=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; pkill -f "listen 127.0.0.1:17961" || true; rm -rf "$work"' EXIT
for bin in "$@"; do
  "$bin" proxy --listen 127.0.0.1:17961 --upstream redis://127.0.0.1:17960 --quiet --requirepass pw \
    --metrics-listen 127.0.0.1:17962 --plugin observe --out "$work" > "$work/proxy.log" 2>&1 &
  pid=$!
  until redis-cli -p 17961 -a pw --no-auth-warning ping 2>/dev/null | grep -q PONG; do sleep 0.1; done
  echo "$bin"
  echo "  before: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
  timeout 30 redis-benchmark -p 17961 -a pw -t get -c 50 -r 100000 -P 16 -n 4000000 -q > "$work/bench.txt" 2>&1 &
  bench=$!
  for s in $(seq 1 30); do
    sleep 1
    kill -0 $bench 2>/dev/null || break
    echo "  ${s} s: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
  done
  wait $bench || true
  echo "  $(tr '\r' '\n' < "$work/bench.txt" | grep 'requests per second' | tail -1)"
  sleep 6
  echo "  6 s after: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
  kill $pid; wait $pid 2>/dev/null || true
done
