#!/usr/bin/env bash
# The two measurements of this folder, as README.md gives them: the release script's own server
# time (script_cost.py) and the whole cycle on a 3-primary cluster (cluster_bench.sh), old vs new.
# Usage: bash run.sh OLD_RELEASE_LUA OUT_DIR   (OLD_RELEASE_LUA: lua/release.lua of f373833,
# e.g. `git show f373833:lua/release.lua > /tmp/old.lua`). Bounded: 9 x 30,000 calls, 3 x 8 s runs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."
old="${1:?give the old release.lua}"; out="${2:?give an output folder}"
mkdir -p "$out"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --logfile /dev/null &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
sleep 0.5
python3 "$here/script_cost.py" "$PORT" "$old" lua/release.lua 9 30000 | tee "$out/script_cost.txt"
kill "$SERVER"
LOCKKIT_DIR="$PWD" bash "$here/cluster_bench.sh" "$out" 3 8s | tee "$out/cluster_bench.txt"
