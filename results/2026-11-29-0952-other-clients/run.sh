#!/usr/bin/env bash
# Repeats this comparison on today's code: each client against a fresh redis-server on a free
# loopback port, 50 concurrent holders over 100k keys, hold 0, TTL 5 s, closed loop, 10 s each.
# Needs node with redis-semaphore and ioredis (npm), python3 with redis (pip). Prints the same
# three lines as other-clients.txt; this folder is left as it was.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p lockkit-cli
L="${CARGO_TARGET_DIR:-target}/release/lockkit"
fresh() {
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null &
  SERVER=$!
  sleep 0.5
}
trap 'kill "${SERVER:-}" 2>/dev/null || true' EXIT
fresh; echo "node redis-semaphore: $(node results/other-clients/node_redis_semaphore.js "$PORT")"; kill "$SERVER"; wait "$SERVER" || true
fresh; echo "redis-py Lock: $(python3 results/other-clients/redis_py_lock.py "redis://127.0.0.1:$PORT")"; kill "$SERVER"; wait "$SERVER" || true
fresh; "$L" bench --url "redis://127.0.0.1:$PORT" --clients 50 --keys 100k --hold 0 --ttl 5s --duration 10s | head -2
