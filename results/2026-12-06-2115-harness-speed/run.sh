#!/usr/bin/env bash
# Usage: bash run.sh INPUT ROUNDS BIN...   (each BIN a lockkit binary; prints one line per run)
# Per round: redis-cli fed INPUT into a fresh redis-server, then `BIN lua exec INPUT` for each BIN.
set -euo pipefail
input=$1 rounds=$2; shift 2
port=6479
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc; }
for r in $(seq 1 "$rounds"); do
  redis-server --port $port --save "" --appendonly no --daemonize yes >/dev/null
  until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.05; done
  t_redis=$(secs sh -c "redis-cli -p $port < '$input'")
  redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true
  sleep 0.2
  line="round $r: redis-cli+redis-server ${t_redis}s"
  for bin in "$@"; do
    t=$(secs "$bin" lua exec "$input")
    line+="; $(basename "$bin") ${t}s = $(echo "scale=2; $t_redis / $t" | bc)x"
  done
  echo "$line"
done
