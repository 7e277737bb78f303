#!/usr/bin/env bash
# The reference run behind results/README.md. Bounded: about 100 s of load in all, every run
# against a local redis-server on a loopback port. Usage: bash results/run.sh [LABEL]
# writes one folder, results/<UTC date>-<time>-<LABEL>/ (LABEL defaults to "reference");
# add a row for it to the table in results/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p lockkit-cli
L="${CARGO_TARGET_DIR:-target}/release/lockkit"
R="results/$(date -u +%Y-%m-%d-%H%M)-${1:-reference}"
mkdir -p "$R"

# 1. The speed goal: uncontended cycles (50 clients, 100k keys, hold 0, TTL 5 s) against a
#    throwaway server, and the server's own ceiling (redis-benchmark -P 16) in the same run.
"$L" bench --clients 50 --keys 100k --hold 0 --ttl 5s --duration 10s --ceiling \
  --json "$R/uncontended.json" | tee "$R/uncontended.txt"

# 2. EVALSHA vs EVAL vs FCALL, one after the other on the same server.
"$L" bench --duration 5s --script-mode all --json "$R/script-modes.json" | tee "$R/script-modes.txt"

# 3. Contention: 50 clients retrying one hot key, 1 ms hold.
"$L" bench --key-dist hot --clients 50 --hold 1ms --retry --retry-deadline 2s --duration 5s \
  --json "$R/hot-key.json" | tee "$R/hot-key.txt"

# 4. A server stopped (SIGSTOP) for 500 ms in the middle of a 10 s run: open loop vs closed loop.
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  --logfile /dev/null &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
sleep 0.5
for mode in open closed; do
  flags=()
  [ "$mode" = open ] && flags=(--rate 5k)
  ( sleep 6; kill -STOP "$SERVER"; sleep 0.5; kill -CONT "$SERVER" ) &
  "$L" bench --url "redis://127.0.0.1:$PORT" --duration 10s "${flags[@]}" \
    --json "$R/stall-$mode.json" | tee "$R/stall-$mode.txt"
  wait $!
done

# 5. Redlock over 3 throwaway servers (every lock is a quorum round on 3 masters).
"$L" bench --nodes 3 --duration 5s --json "$R/redlock-3.json" | tee "$R/redlock-3.txt"

# 6. TTL sizing from the contended run, for a job whose p99 is 100 ms.
"$L" ttl "$R/hot-key.json" --work-p99 100ms | tee "$R/ttl-hot-key.txt"
